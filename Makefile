# Developer entry points. Each target installs missing Debian packages first.
#   make demo   build, then train Fashion-MNIST on 2 ranks with `dlrun local`
#   make test   build, then run every test through ctest
BUILD ?= build
CMAKE_FLAGS ?=

.PHONY: all deps build test demo bench clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 900 -j 2

demo: build
	@scripts/demo.sh $(BUILD)

bench: build
	@bench/launch.sh $(BUILD)/cli/dlrun
	@/usr/bin/python3 bench/jobs.py $(BUILD)/cli/dlrun

clean:
	rm -rf $(BUILD)
