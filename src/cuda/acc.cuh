/* acc.cuh -- element math in registers for the kernels that reduce 8-byte words (the lean packet
 * kernel, lean.cu; the direct kernel, direct.cu): accumulators per dtype family, fed in ascending
 * rank order, converted back once, so the same bits as dtype.h's pl_reduce_elems on the host.
 * Include after atom_cuda.cuh (PL_DEV) and dev_core.cuh's pl_rv_* helpers. */
#ifndef PL_CUDA_ACC_CUH
#define PL_CUDA_ACC_CUH

/* Accumulator family of a dtype: 0 f32 (every float narrower than f64), 1 f64, 2 signed, 3
 * unsigned (dev_core.cuh's pl_rv_* helpers do each family's conversions, as SNAC's reductions). */
#define PL_LEAN_FAM_(dt)                                                                           \
  ((dt) == PURLIN_F64                                                       ? 1                    \
   : (dt) == PURLIN_I8 || (dt) == PURLIN_I32 || (dt) == PURLIN_I64         ? 2                    \
   : (dt) == PURLIN_U8 || (dt) == PURLIN_U32 || (dt) == PURLIN_U64         ? 3                    \
                                                                            : 0)

/* The accumulators of one packet's elements (8 bytes: 1 to 8 elements); only DT's family's array
 * is used, and it lives in registers (every index is a constant after unrolling). */
typedef struct {
  float f[8];
  double d;
  int64_t i[8];
  uint64_t u[8];
} pl_lacc_t;

/* Feed the elements of word v (one source's packet) to the accumulators: the first source sets
 * them, later ones go through op, as PL_DR_*_ and pl_reduce_elems do per element. */
template <int DT> PL_DEV void pl_lacc_put(pl_lacc_t *a, uint64_t v, int op, int first) {
  const int EB = PL_RV_EB_(DT), E = 64 / EB, F = PL_LEAN_FAM_(DT);
#pragma unroll
  for (int j = 0; j < E; j++) {
    uint64_t c = EB == 64 ? v : v >> (EB * j) & pl_rv_mask(EB);
    if (F == 0) {
      float x = pl_rv_in_f(DT, c);
      a->f[j] = first ? x : pl_opf(op, a->f[j], x);
    } else if (F == 1) {
      double x = pl_rv_in_d(DT, c);
      a->d = first ? x : pl_opd(op, a->d, x);
    } else if (F == 2) {
      int64_t x = pl_rv_in_i(DT, c);
      a->i[j] = first ? x : pl_opi(op, a->i[j], x);
    } else {
      uint64_t x = pl_rv_in_u(DT, c);
      a->u[j] = first ? x : pl_opu(op, a->u[j], x);
    }
  }
}
/* The reduced word (AVG divided by `divisor`), elements converted back to DT. */
template <int DT> PL_DEV uint64_t pl_lacc_get(const pl_lacc_t *a, int op, int divisor) {
  const int EB = PL_RV_EB_(DT), E = 64 / EB, F = PL_LEAN_FAM_(DT);
  uint64_t v = 0;
#pragma unroll
  for (int j = 0; j < E; j++) {
    uint64_t c = F == 0   ? pl_rv_out_f(DT, op, a->f[j], divisor)
                 : F == 1 ? pl_rv_out_d(DT, op, a->d, divisor)
                 : F == 2 ? pl_rv_out_i(DT, op, a->i[j], divisor)
                          : pl_rv_out_u(DT, op, a->u[j], divisor);
    v |= EB == 64 ? c : (c & pl_rv_mask(EB)) << (EB * j);
  }
  return v;
}

#endif
