// The goodput unit tests' own main: this executable links no LibTorch.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
