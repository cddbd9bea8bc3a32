// Everything a program needs to call Canopy from C++: the workloads' APIs, custom traversals on
// the CPU, forest inference, and reading points from files. CUDA-free; custom traversals on the
// GPU add runtime/custom.cuh in a .cu file.
#pragma once

#include "io/dataset.hpp"
#include "runtime/barnes_hut.hpp"
#include "runtime/custom.hpp"
#include "runtime/forest_predictor.hpp"
#include "runtime/knn.hpp"
#include "runtime/point_correlation.hpp"
