# Finds Canopy's dependencies; a missing one stops the configure step with the Debian package
# that provides it (scripts/install-deps.sh installs them all).

function(canopy_missing what package)
  message(FATAL_ERROR
    "Canopy needs ${what}, which was not found.\n"
    "Install it with:  apt-get install ${package}\n"
    "or run scripts/install-deps.sh as root, which installs everything Canopy needs.")
endfunction()

find_package(CUDAToolkit REQUIRED)

find_package(TBB CONFIG QUIET)
if(NOT TBB_FOUND)
  canopy_missing("oneTBB" "libtbb-dev")
endif()

find_package(ZLIB QUIET)
if(NOT ZLIB_FOUND)
  canopy_missing("zlib" "zlib1g-dev")
endif()

find_package(Boost 1.70 QUIET)
if(NOT Boost_FOUND OR NOT EXISTS "${Boost_INCLUDE_DIRS}/boost/graph/adjacency_list.hpp")
  canopy_missing("Boost.Graph" "libboost-graph-dev")
endif()

# The forest importer reads JSON models: the library itself needs nlohmann-json (header-only).
find_package(nlohmann_json 3 QUIET)
if(NOT nlohmann_json_FOUND)
  canopy_missing("nlohmann-json" "nlohmann-json3-dev")
endif()

if(CANOPY_BUILD_BENCHMARKS)
  find_package(CLI11 CONFIG QUIET)
  if(NOT CLI11_FOUND)
    canopy_missing("CLI11" "libcli11-dev")
  endif()
endif()

if(CANOPY_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    canopy_missing("GoogleTest" "libgtest-dev")
  endif()
endif()
