#!/bin/sh
# The installed library as a user meets it: `cmake --install` into a
# temporary prefix (and once more staged under DESTDIR), then the complete
# program of include/tessel/tessel.h built with `pkg-config --cflags --libs
# tessel`, and examples/ built through the CMake package config against the
# shared and the static library; each compiles a zoo model, runs it and
# prints its cycles.
#   tests/install/install_test.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() { echo "install_test: $*" >&2; exit 1; }

# examples/hello.c is the header's program, as it stands there.
python3 "$src/scripts/header_example.py" "$src/include/tessel/tessel.h" > "$work/hello.c"
tail -n +2 "$src/examples/hello.c" | cmp -s - "$work/hello.c" ||
    fail "examples/hello.c differs from the program in include/tessel/tessel.h"

prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in include/tessel/tessel.h bin/tessel; do
    [ -e "$prefix/$f" ] || fail "$f was not installed"
done
pc=$(find "$prefix" -name tessel.pc)
[ -n "$pc" ] || fail "no tessel.pc was installed"
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libtessel.so" ] && [ -e "$libdir/libtessel.a" ] || fail "libtessel.so and libtessel.a are not both in $libdir"

# pkg-config, against the shared library.
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") pkg-config --cflags --libs tessel)
cc -std=c11 -Wall -Wextra -Werror "$work/hello.c" $flags -Wl,-rpath,"$libdir" -o "$work/hello"
"$work/hello" > "$work/out.txt" || fail "hello failed: $(cat "$work/out.txt")"
grep -Eq '^[1-9][0-9]* cycles$' "$work/out.txt" || fail "hello printed '$(cat "$work/out.txt")'"
echo "pkg-config: $(cat "$work/out.txt")"

# The CMake package config, shared and static; the cycles agree.
cmake -S "$src/examples" -B "$work/examples" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_RPATH="$libdir" > "$work/cmake.log" ||
    { cat "$work/cmake.log"; fail "the examples do not configure against the installed package"; }
cmake --build "$work/examples" > "$work/build.log" || { cat "$work/build.log"; fail "the examples do not build"; }
for exe in hello hello_static; do
    "$work/examples/$exe" > "$work/$exe.txt" || fail "$exe failed"
    cmp -s "$work/out.txt" "$work/$exe.txt" || fail "$exe printed '$(cat "$work/$exe.txt")', hello '$(cat "$work/out.txt")'"
done
ldd "$work/examples/hello_static" | grep -q libtessel && fail "hello_static loads libtessel.so"
echo "cmake: $(cat "$work/hello_static.txt") (shared and static)"

# The Python module, from where the install put it, finds the library
# there (TESSEL_LIBRARY unset) and gives the same cycles.
py=$(find "$prefix" -name __init__.py -path "*/tessel/*")
[ -n "$py" ] || fail "the Python module was not installed"
got=$(cd "$work" && env -u TESSEL_LIBRARY PYTHONPATH=$(dirname "$(dirname "$py")") /usr/bin/python3 -c \
      'import tessel; print(tessel.compile("zoo:mlp:tokens=64,width=128,hidden=256").run().cycles, "cycles")')
[ "$got" = "$(cat "$work/out.txt")" ] || fail "python printed '$got', hello '$(cat "$work/out.txt")'"
echo "python: $got"

# DESTDIR stages the same files under another root.
DESTDIR=$work/stage cmake --install "$build" --prefix /opt/tessel > /dev/null
[ -e "$work/stage/opt/tessel/include/tessel/tessel.h" ] || fail "DESTDIR was not honoured"
staged=$(find "$work/stage/opt/tessel" -name tessel.pc)
PKG_CONFIG_PATH=$(dirname "$staged") pkg-config --cflags tessel | grep -q "$work/stage/opt/tessel" ||
    fail "the staged tessel.pc does not point into the staged tree"
echo "install: ok"
