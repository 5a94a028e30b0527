/* test_sym -- pl_sym_find, the lookup behind zero copy, purlin_mem_free / purlin_mem_deregister and
 * purlin_device_handle: which peer-mapped range (purlin_mem_alloc buffer or registered range) holds
 * [p, p + bytes), against an independent reference, on ranges laid back to back as PyTorch's
 * caching allocator hands them out (the first GPU run of purlin_mem_register found that a pointer
 * just past one range matched that range, at offset = its size), with gaps, unused slots and
 * random queries. No GPU: the table is filled by hand. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

static int g_failures;
static long g_checks;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    g_checks++;                                                                                    \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      g_failures++;                                                                                \
    }                                                                                              \
  } while (0)

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void) { /* xorshift64* */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return g_rng * 0x2545f4914f6cdd1dull;
}

/* The reference: the used range with start <= q < start + bytes that also holds q + len; ranges
 * never overlap, so at most one holds q. Returns its index + 1, or 0. */
static uint64_t ref_find(const struct purlin_comm *c, uintptr_t q, size_t len, uint64_t *off) {
  for (int i = 0; i < c->nsyms; i++) {
    const pl_sym_t *s = &c->syms[i];
    uintptr_t b = (uintptr_t)s->base[c->rank];
    if (!s->used) continue;
    int inside = q >= b && q < b + s->bytes;
    if (inside) {
      if (q + len > b + s->bytes) return 0; /* runs past the range that holds q */
      *off = q - b;
      return (uint64_t)i + 1;
    }
  }
  return 0;
}

static void check_one(const struct purlin_comm *c, uintptr_t q, size_t len) {
  uint64_t id = 0, off = 0, rid, roff = 0;
  int got = pl_sym_find(c, (const void *)q, len, &id, &off);
  rid = ref_find(c, q, len, &roff);
  CHECK(got == (rid != 0), "q %#lx len %zu: found %d, reference %llu", (unsigned long)q, len, got,
        (unsigned long long)rid);
  if (got && rid)
    CHECK(id == rid && off == roff, "q %#lx len %zu: id %llu off %llu, reference id %llu off %llu",
          (unsigned long)q, len, (unsigned long long)id, (unsigned long long)off,
          (unsigned long long)rid, (unsigned long long)roff);
}

int main(void) {
  struct purlin_comm *c = calloc(1, sizeof *c);
  if (!c) return 2;
  const uintptr_t A = (uintptr_t)1 << 40;
  enum { N = 40 };
  c->syms = calloc(N, sizeof(pl_sym_t));
  if (!c->syms) return 2;
  for (int rank = 0; rank < 3; rank++) {
    c->rank = rank;
    c->world = 3;
    /* fixed cases: [A, A+100) and [A+100, A+300) back to back, a gap, [A+400, A+416) */
    memset(c->syms, 0, N * sizeof(pl_sym_t));
    c->nsyms = 4;
    uintptr_t st[4] = {A, A + 100, A + 1000, A + 400};
    size_t by[4] = {100, 200, 50, 16};
    for (int i = 0; i < 4; i++) {
      c->syms[i].base[rank] = (char *)(st[i] + (uintptr_t)rank * 4096);
      c->syms[i].bytes = by[i];
      c->syms[i].used = i != 2; /* slot 2: freed */
    }
    uintptr_t o = (uintptr_t)rank * 4096;
    uint64_t id = 0, off = 0;
    CHECK(pl_sym_find(c, (void *)(A + o + 100), 0, &id, &off) && id == 2 && off == 0,
          "the start of the second range (just past the first): id %llu off %llu",
          (unsigned long long)id, (unsigned long long)off);
    CHECK(pl_sym_find(c, (void *)(A + o + 99), 1, &id, &off) && id == 1 && off == 99,
          "the first range's last byte");
    CHECK(!pl_sym_find(c, (void *)(A + o + 99), 2, &id, &off), "crossing into the second range");
    CHECK(!pl_sym_find(c, (void *)(A + o + 300), 0, &id, &off), "just past the second range");
    CHECK(!pl_sym_find(c, (void *)(A + o + 1000), 0, &id, &off), "a freed slot's start");
    CHECK(pl_sym_find(c, (void *)(A + o), 100, &id, &off) && id == 1 && off == 0,
          "the whole first range");
    CHECK(pl_sym_find(c, (void *)(A + o + 400), 16, &id, &off) && id == 4 && off == 0,
          "a range in a later slot than a freed one");
    for (int i = 0; i < 600; i++) check_one(c, A + o + (uintptr_t)i, (size_t)(rnd() % 40));
    /* random tables: runs of back-to-back ranges with gaps, some slots unused; random queries
     * near every boundary and anywhere */
    for (int t = 0; t < 300; t++) {
      memset(c->syms, 0, N * sizeof(pl_sym_t));
      c->nsyms = 1 + (int)(rnd() % N);
      uintptr_t p = A + o;
      for (int i = 0; i < c->nsyms; i++) {
        if (rnd() % 3 == 0) p += 1 + rnd() % 64; /* a gap */
        size_t b = 1 + (size_t)(rnd() % 300);
        c->syms[i].base[rank] = (char *)p;
        c->syms[i].bytes = b;
        c->syms[i].used = rnd() % 5 != 0;
        p += b;
      }
      /* shuffle the slots: the table's order is not the address order */
      for (int i = c->nsyms - 1; i > 0; i--) {
        int j = (int)(rnd() % (uint64_t)(i + 1));
        pl_sym_t x = c->syms[i];
        c->syms[i] = c->syms[j];
        c->syms[j] = x;
      }
      for (int i = 0; i < c->nsyms; i++) {
        uintptr_t b = (uintptr_t)c->syms[i].base[rank], e = b + c->syms[i].bytes;
        uintptr_t qs[6] = {b, b + 1, e - 1, e, e + 1, b - 1};
        for (int k = 0; k < 6; k++) {
          check_one(c, qs[k], 0);
          check_one(c, qs[k], 1);
          check_one(c, qs[k], (size_t)(rnd() % 320));
        }
      }
      for (int k = 0; k < 200; k++)
        check_one(c, A + o + (uintptr_t)(rnd() % (p - A - o + 64)), (size_t)(rnd() % 64));
    }
  }
  free(c->syms);
  free(c);
  if (g_failures) {
    fprintf(stderr, "test_sym: %d of %ld checks failed\n", g_failures, g_checks);
    return 1;
  }
  printf("test_sym: %ld checks passed\n", g_checks);
  return 0;
}
