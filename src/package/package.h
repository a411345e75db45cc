/* package: the file the compiler writes and the simulator runs. It holds
 * everything the simulator needs and nothing it must look up elsewhere:
 *
 *   header    magic "TESSPKG\0", format version, machine fingerprint
 *   machine   the full machine description (its fingerprint must match)
 *   program   steps, kernel runs, exchange fragments (low.h), placed: every
 *             address absolute and inside the tile's memory map
 *   segments  sparse initial tile memory (weights, constants): (tile, address,
 *             bytes, offset into the blob); replicas share blob bytes
 *   bindings  host inputs and outputs: name, dtype, scale, shape, layout and
 *             address of the buffer holding them; and probes, where every
 *             graph op's result can be read as soon as a step completes it
 *             (for locating a fault, never needed to run)
 *   meta      JSON text: model, recipe, compile statistics
 *
 * The file is a little-endian sequence of sections, each a tag, a CRC-32C of
 * its payload, a byte length and its records (a run holds only what its
 * kernel reads, whatever low_run's arrays can hold); the layout is in
 * docs/package.md. Every checksum is verified before anything is read. Writing the same
 * package twice gives the same bytes. A package is untrusted input: the
 * reader checks every count, index, offset and length, and every address a
 * run or fragment can touch (over all repeat iterations), before anyone uses it.
 */
#ifndef TESSEL_PACKAGE_H
#define TESSEL_PACKAGE_H

#include "../layout/layout.h"
#include "../low/low.h"
#include "../machine/machine.h"

enum { PACKAGE_VERSION = 4 };

typedef struct pkg_segment {
    uint32_t tile;
    uint32_t addr;      /* byte address on the tile */
    uint32_t bytes;
    uint64_t blob_off;  /* where its bytes start in the blob */
} pkg_segment;

/* What a binding is for: data the host writes before the run, reads after
 * it, or may read after step `step` each time it executes (a probe). */
typedef enum { PKG_INPUT, PKG_OUTPUT, PKG_PROBE } pkg_role;

typedef struct pkg_binding {
    const char *name;   /* the graph value */
    uint8_t role;       /* pkg_role */
    dtype dtype;
    int8_t scale;       /* 8-bit types */
    layout layout;      /* how the tensor lies over tiles (replica 0 is read for outputs) */
    uint32_t addr;      /* the buffer's byte address on every tile of the layout */
    int32_t step;       /* probes: the step that completes the value (a REPEAT
                           step: at the start of every iteration; an END step:
                           when its loop exits); -1 for inputs and outputs */
} pkg_binding;

typedef struct package {
    arena arena;                /* owns everything below */
    machine machine;
    uint64_t fingerprint;       /* machine_fingerprint(&machine) */
    low_program prog;           /* placed: every low_addr.buf is LOW_ABSOLUTE */
    VEC(pkg_segment) segments;
    uint8_t *blob;              /* initial memory bytes */
    uint64_t blob_bytes;
    VEC(pkg_binding) bindings;  /* inputs first, in graph order, then outputs, then probes in program order */
    const char *meta;           /* JSON text */
} package;

void package_init(package *p);
void package_free(package *p);

/* Serialises p (deterministically) to path, all or nothing. */
int package_save(const package *p, const char *path, diag *d);
/* The same into an open file (path names it in errors); the caller owns
 * the file and its all-or-nothing commit. */
int package_write(const package *p, FILE *f, const char *path, diag *d);
/* Parses and fully validates a package image; path names it in errors. */
int package_parse(const void *bytes, size_t len, const char *path, package *out, diag *d);
int package_load(const char *path, package *out, diag *d);
/* The serialised image (malloc'd), for tests that corrupt it. */
uint8_t *package_image(const package *p, size_t *len);
/* Rewrites the checksum of every section whose bounds lie inside img: for
 * tests and fuzzers that damage a section on purpose to reach the parser. */
void package_fix_checksums(uint8_t *img, size_t len);

#endif
