# The two commands a fresh Debian 12 machine needs: `make demo` and `make test`.
# Both install what is missing (scripts/setup.sh) and build first.
BUILD     ?= build
JOBS      ?= $(shell nproc)
CMAKE_GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all setup build test demo asan-test alloc-sweep fuzz fuzz-smoke bench clean

all: build

setup:
	@scripts/setup.sh

# cmake needs the packages setup installs: under make -j, setup runs first
# (an order-only prerequisite), never beside it.
$(BUILD)/CMakeCache.txt: | setup
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)/tessel

# The whole suite once more under AddressSanitizer + UndefinedBehaviorSanitizer.
# The same build can inject allocation failures (nothing fails unless
# TESSEL_FAIL_ALLOC is set), so alloc-sweep reuses it.
ASAN_CONFIG = cmake -S . -B build-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DTESSEL_SANITIZE=ON -DTESSEL_ALLOC_FAIL=ON
asan-test: setup
	$(ASAN_CONFIG)
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j $(JOBS) -LE 'slow|alloc_sweep'

# Out of memory is a user error: small jobs with their N-th allocation
# failing, under ASan, must exit 2 cleanly (scripts/alloc_sweep.py).
# CI tries the first 200 failure points of each job and every 8th after
# (about 6,500 runs, 10 min on 2 cores: the compile, check and library
# (api) jobs make 12,000 to 14,400 allocations each; every 5th took 12-14
# min before the api job);
# ALLOC_SWEEP_ARGS=--stride=1 tries every one.
ALLOC_SWEEP_ARGS ?= --first 200 --stride 8
alloc-sweep: setup
	$(ASAN_CONFIG) "-DALLOC_SWEEP_ARGS=$(ALLOC_SWEEP_ARGS)"
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -L alloc_sweep

fuzz: setup
	CC=clang-14 cmake -S . -B build-fuzz $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTESSEL_FUZZ=ON
	cmake --build build-fuzz -j $(JOBS)

# A short run of every fuzz target from its seed corpus (FUZZ_SECONDS each).
FUZZ_SECONDS ?= 30
fuzz-smoke: fuzz
	@scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS)

bench: build
	@scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
