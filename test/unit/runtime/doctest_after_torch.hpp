#pragma once
// LibTorch pulls in glog, whose CHECK, CHECK_EQ … macros collide with doctest's. Include
// this header after every LibTorch header in a test file: doctest's macros win.

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#undef CHECK_FALSE
#undef CHECK_THROWS
#undef CHECK_NOTNULL
#include <doctest/doctest.h>
