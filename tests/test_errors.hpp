// The error tests' shared check: the canopy::Error message a call throws.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <functional>
#include <string>

#include "core/types.hpp"

namespace canopy {
namespace test {

// The message of the canopy::Error that f throws; a test failure (naming `what`, the error
// that was expected) if f throws nothing or another exception.
inline std::string error_of(const std::function<void()>& f, const std::string& what = "an error") {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << what << ", got a non-canopy::Error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected " << what << ", got no error";
  return "";
}

}  // namespace test
}  // namespace canopy

// EXPECT_HAS(message, part): the message contains part (and is shown when it does not).
#define EXPECT_HAS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << "message: " << (text)
