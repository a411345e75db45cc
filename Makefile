# The two commands a fresh Debian 12 machine needs: `make demo` and `make test`.
# Both install what is missing (scripts/setup.sh) and build first.
BUILD     ?= build
JOBS      ?= $(shell nproc)
CMAKE_GEN := $(shell command -v ninja >/dev/null 2>&1 && echo "-G Ninja")

.PHONY: all setup build test demo asan-test fuzz fuzz-smoke bench clean

all: build

setup:
	@scripts/setup.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=RelWithDebInfo

build: setup $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

demo: build
	@scripts/demo.sh $(BUILD)/tessel

# The whole suite once more under AddressSanitizer + UndefinedBehaviorSanitizer.
asan-test: setup
	cmake -S . -B build-asan $(CMAKE_GEN) -DCMAKE_BUILD_TYPE=Debug -DTESSEL_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j $(JOBS) -LE slow

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
