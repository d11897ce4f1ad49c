// collsynth CUDA interpreter: executes a compiled MSCCL-IR program with every rank on one GPU.
//
// One CUDA block per (rank, threadblock) of the IR, launched cooperatively so that all are resident.
// The host flattens the IR (collsynth/runtime/cuda/flatten.py documents the tables and the memory
// layout); this file only interprets the tables. Self-contained: no #include, so both nvcc and NVRTC
// (CuPy RawModule) compile it.
//
// Synchronisation:
//   * FIFO per connection, `nslots` slots. The sender waits for tail - head < nslots, writes the slot,
//     then (after a block barrier) thread 0 publishes tail+1 with a release store. The receiver waits
//     for tail > head with acquire loads, reads the slot, and after a barrier publishes head+1.
//   * Cross-block dependencies: progress[b] = tile * nsteps + step + 1, published (release) after a
//     step others wait on; waiters spin (acquire) for the goal of the same tile.
//   * Data accesses bypass L1 (ld/st .cg): peers' writes reach us through L2 only. Every data access is a
//     volatile asm with a memory clobber, so the compiler keeps it between the barriers around its step.
//   * Watchdog: every spin loop is bounded by budget_ns of %globaltimer; the first block over budget
//     raises the global abort flag, every waiting block records where it is stuck and returns.

typedef long long i64;
typedef unsigned long long u64;

// --- table layouts (must match flatten.py) -------------------------------------------------------------
#define CS_STEP_COLS 8
#define CS_STEP_TYPE 0
#define CS_STEP_CNT 1
#define CS_STEP_SRC 2
#define CS_STEP_DST 3
#define CS_STEP_DEP_BLOCK 4
#define CS_STEP_DEP_STEP 5
#define CS_STEP_DEP_NSTEPS 6
#define CS_STEP_PUBLISH 7

// A block's step rows are copied into shared memory at start (all threads at once: one memory latency
// instead of one per step on the critical path) when it has at most this many steps; else read in place.
#define CS_SHARED_STEPS 64

#define CS_BLOCK_COLS 8
#define CS_BLOCK_RANK 0
#define CS_BLOCK_TB 1
#define CS_BLOCK_FIRST_STEP 2
#define CS_BLOCK_NSTEPS 3
#define CS_BLOCK_SEND_CONN 4
#define CS_BLOCK_RECV_CONN 5

#define CS_CONN_COLS 6
#define CS_CONN_SLOT_BASE 3

#define CS_STATUS_COLS 4
#define CS_STATE_DONE 1
#define CS_STATE_STUCK 2
#define CS_WAIT_DEP 1
#define CS_WAIT_RECV 2
#define CS_WAIT_SEND 3

// Step types.
#define CS_SEND 0
#define CS_RECV 1
#define CS_RCS 2
#define CS_RRS 3
#define CS_RRC 4
#define CS_RRCS 5
#define CS_CPY 6
#define CS_RE 7
#define CS_NOP 8

// Element types and reduction operators.
#define CS_DT_F32 0
#define CS_DT_F16 1
#define CS_DT_BF16 2
#define CS_DT_I32 3
#define CS_OP_SUM 0
#define CS_OP_PROD 1
#define CS_OP_MAX 2
#define CS_OP_MIN 3

#define CS_MAX_THREADS 512
#define CS_UNROLL 4
#define CS_SPIN_CHECK 255u

struct alignas(16) Vec16 {
  unsigned int x, y, z, w;
};

// --- memory primitives -----------------------------------------------------------------------------------
__device__ __forceinline__ u64 ld_acquire(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release(u64* p, u64 v) {
  asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned int ld_volatile_u32(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ u64 global_timer_ns() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ Vec16 load_vec(const Vec16* p) {
  Vec16 v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void store_vec(Vec16* p, const Vec16& v) {
  asm volatile("st.global.cg.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ unsigned int load_elem(const unsigned int* p) {
  unsigned int v;
  asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned short load_elem(const unsigned short* p) {
  unsigned short v;
  asm volatile("ld.global.cg.u16 %0, [%1];" : "=h"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_elem(unsigned int* p, unsigned int v) {
  asm volatile("st.global.cg.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void store_elem(unsigned short* p, unsigned short v) {
  asm volatile("st.global.cg.u16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}

// --- arithmetic: received OP local, computed as the CPU interpreter does (see numerics.py) -----------
__device__ __forceinline__ float half_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}

__device__ __forceinline__ unsigned short float_to_half(float f) {
  unsigned short h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

__device__ __forceinline__ float bf16_to_float(unsigned short h) { return __uint_as_float(((unsigned int)h) << 16); }

__device__ __forceinline__ unsigned short float_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                                       // nearest even
  return (unsigned short)(u >> 16);
}

// Inline PTX without .ftz: CuPy compiles with -ftz=true, but numpy keeps subnormals.
__device__ __forceinline__ float add_f32(float a, float b) {
  float r;
  asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

__device__ __forceinline__ float mul_f32(float a, float b) {
  float r;
  asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// a if (a is NaN or a > b) else b: numpy.maximum's choice, NaN propagating. GREATER=false gives minimum.
template <bool GREATER>
__device__ __forceinline__ float pick_f32(float a, float b) {
  float r;
  if (GREATER)
    asm("{\n\t.reg .pred p, q;\n\tsetp.gt.f32 p, %1, %2;\n\tsetp.nan.f32 q, %1, %1;\n\tor.pred p, p, q;\n\t"
        "selp.f32 %0, %1, %2, p;\n\t}"
        : "=f"(r) : "f"(a), "f"(b));
  else
    asm("{\n\t.reg .pred p, q;\n\tsetp.lt.f32 p, %1, %2;\n\tsetp.nan.f32 q, %1, %1;\n\tor.pred p, p, q;\n\t"
        "selp.f32 %0, %1, %2, p;\n\t}"
        : "=f"(r) : "f"(a), "f"(b));
  return r;
}

template <int OP>
__device__ __forceinline__ float float_op(float a, float b) {
  if (OP == CS_OP_SUM) return add_f32(a, b);
  if (OP == CS_OP_PROD) return mul_f32(a, b);
  if (OP == CS_OP_MAX) return pick_f32<true>(a, b);
  return pick_f32<false>(a, b);
}

template <int DT, int OP>
struct Reduce;

template <int OP>
struct Reduce<CS_DT_F32, OP> {
  typedef unsigned int Bits;
  static __device__ __forceinline__ Bits apply(Bits a, Bits b) {
    return __float_as_uint(float_op<OP>(__uint_as_float(a), __uint_as_float(b)));
  }
};

template <int OP>
struct Reduce<CS_DT_I32, OP> {
  typedef unsigned int Bits;
  static __device__ __forceinline__ Bits apply(Bits a, Bits b) {
    if (OP == CS_OP_SUM) return a + b;  // unsigned: wraps modulo 2^32 like numpy int32
    if (OP == CS_OP_PROD) return a * b;
    if (OP == CS_OP_MAX) return ((int)a > (int)b) ? a : b;
    return ((int)a < (int)b) ? a : b;
  }
};

template <int OP>
struct Reduce<CS_DT_F16, OP> {
  typedef unsigned short Bits;
  static __device__ __forceinline__ Bits apply(Bits a, Bits b) {
    return float_to_half(float_op<OP>(half_to_float(a), half_to_float(b)));
  }
};

template <int OP>
struct Reduce<CS_DT_BF16, OP> {
  typedef unsigned short Bits;
  static __device__ __forceinline__ Bits apply(Bits a, Bits b) {
    return float_to_bf16(float_op<OP>(bf16_to_float(a), bf16_to_float(b)));
  }
};

template <class R>
__device__ __forceinline__ unsigned int reduce_word(unsigned int a, unsigned int b, unsigned int /*tag*/) {
  return R::apply(a, b);
}

// Two 16-bit elements packed in a 32-bit word.
template <class R>
__device__ __forceinline__ unsigned int reduce_word(unsigned int a, unsigned int b, unsigned short /*tag*/) {
  unsigned int lo = R::apply((unsigned short)(a & 0xffffu), (unsigned short)(b & 0xffffu));
  unsigned int hi = R::apply((unsigned short)(a >> 16), (unsigned short)(b >> 16));
  return (lo & 0xffffu) | (hi << 16);
}

template <class R>
__device__ __forceinline__ Vec16 reduce_vec(const Vec16& a, const Vec16& b) {
  typename R::Bits tag = 0;
  Vec16 r;
  r.x = reduce_word<R>(a.x, b.x, tag);
  r.y = reduce_word<R>(a.y, b.y, tag);
  r.z = reduce_word<R>(a.z, b.z, tag);
  r.w = reduce_word<R>(a.w, b.w, tag);
  return r;
}

// --- the data mover ---------------------------------------------------------------------------------------
// For each of `cnt` pieces j of `len` elements: out1[j] (and out2[j]) = in[j] (OP other[j] when REDUCE).
// Each operand is a base pointer plus a stride between pieces (chunk_elems in buffers, piece_elems in slots).
template <class R, bool REDUCE, bool TWO_OUT>
__device__ void move_pieces(int cnt, i64 len, bool vectorize, const typename R::Bits* in, i64 in_stride,
                            const typename R::Bits* other, i64 other_stride, typename R::Bits* out1,
                            i64 out1_stride, typename R::Bits* out2, i64 out2_stride) {
  typedef typename R::Bits Bits;
  const int tid = threadIdx.x;
  const int nthreads = blockDim.x;
  const i64 per_vec = 16 / sizeof(Bits);
  const i64 nvec = vectorize ? len / per_vec : 0;
  for (int j = 0; j < cnt; ++j) {
    const Bits* a = in + j * in_stride;
    const Bits* b = REDUCE ? other + j * other_stride : a;
    Bits* o1 = out1 + j * out1_stride;
    Bits* o2 = TWO_OUT ? out2 + j * out2_stride : o1;
    const Vec16* a4 = reinterpret_cast<const Vec16*>(a);
    const Vec16* b4 = reinterpret_cast<const Vec16*>(b);
    Vec16* o14 = reinterpret_cast<Vec16*>(o1);
    Vec16* o24 = reinterpret_cast<Vec16*>(o2);
    for (i64 base = tid; base < nvec; base += (i64)CS_UNROLL * nthreads) {
      Vec16 v[CS_UNROLL];
#pragma unroll
      for (int u = 0; u < CS_UNROLL; ++u) {
        const i64 k = base + (i64)u * nthreads;
        if (k < nvec) v[u] = load_vec(a4 + k);
      }
      if (REDUCE) {
#pragma unroll
        for (int u = 0; u < CS_UNROLL; ++u) {
          const i64 k = base + (i64)u * nthreads;
          if (k < nvec) v[u] = reduce_vec<R>(v[u], load_vec(b4 + k));
        }
      }
#pragma unroll
      for (int u = 0; u < CS_UNROLL; ++u) {
        const i64 k = base + (i64)u * nthreads;
        if (k < nvec) {
          store_vec(o14 + k, v[u]);
          if (TWO_OUT) store_vec(o24 + k, v[u]);
        }
      }
    }
    for (i64 k = nvec * per_vec + tid; k < len; k += nthreads) {  // scalar path, or the tail after the vectors
      Bits v = load_elem(a + k);
      if (REDUCE) v = R::apply(v, load_elem(b + k));
      store_elem(o1 + k, v);
      if (TWO_OUT) store_elem(o2 + k, v);
    }
  }
}

// --- waiting, with the watchdog -----------------------------------------------------------------------
struct Watchdog {
  unsigned int* abort_flag;
  u64 budget_ns;
};

// Spin (thread 0 only) until *counter >= goal. False when the watchdog fired or another block aborted.
__device__ bool wait_at_least(const u64* counter, u64 goal, const Watchdog& dog) {
  if (ld_acquire(counter) >= goal) return true;
  const u64 start = global_timer_ns();
  for (unsigned int spins = 1;; ++spins) {
    if (ld_acquire(counter) >= goal) return true;
    if ((spins & CS_SPIN_CHECK) == 0) {
      if (ld_volatile_u32(dog.abort_flag) != 0) return false;
      if (global_timer_ns() - start > dog.budget_ns) {
        atomicCAS(dog.abort_flag, 0u, 1u);
        return false;
      }
    }
  }
}

// --- the interpreter -----------------------------------------------------------------------------------
template <class R>
__device__ void interpret(typename R::Bits* data, typename R::Bits* fifo, const i64* blocks, const i64* steps,
                          const i64* conns, u64* tail, u64* head, u64* progress, i64* status,
                          unsigned int* abort_flag, i64 chunk_elems, i64 piece_elems, i64 ntiles, i64 slot_elems,
                          int nslots, int vectorize, u64 budget_ns) {
  typedef typename R::Bits Bits;
  __shared__ int stop;
  const int b = blockIdx.x;
  const i64* blk = blocks + (i64)b * CS_BLOCK_COLS;
  const i64 first = blk[CS_BLOCK_FIRST_STEP];
  const int nsteps = (int)blk[CS_BLOCK_NSTEPS];
  const int send_conn = (int)blk[CS_BLOCK_SEND_CONN];
  const int recv_conn = (int)blk[CS_BLOCK_RECV_CONN];
  Bits* send_slots = send_conn >= 0 ? fifo + conns[(i64)send_conn * CS_CONN_COLS + CS_CONN_SLOT_BASE] : fifo;
  Bits* recv_slots = recv_conn >= 0 ? fifo + conns[(i64)recv_conn * CS_CONN_COLS + CS_CONN_SLOT_BASE] : fifo;
  const Watchdog dog = {abort_flag, budget_ns};
  const bool vec = vectorize != 0;
  __shared__ i64 step_rows[CS_SHARED_STEPS * CS_STEP_COLS];
  const bool rows_shared = nsteps <= CS_SHARED_STEPS;
  if (rows_shared) {
    for (int k = threadIdx.x; k < nsteps * CS_STEP_COLS; k += blockDim.x) {
      step_rows[k] = steps[first * CS_STEP_COLS + k];
    }
  }
  __syncthreads();
  const i64* rows = rows_shared ? step_rows : steps + first * CS_STEP_COLS;
  u64 sent = 0, received = 0;  // messages this block wrote / consumed (uniform across its threads)

  for (i64 t = 0; t < ntiles; ++t) {
    const i64 offset = t * piece_elems;
    const i64 len = piece_elems < chunk_elems - offset ? piece_elems : chunk_elems - offset;
    for (int s = 0; s < nsteps; ++s) {
      const i64* st = rows + (i64)s * CS_STEP_COLS;
      const int type = (int)st[CS_STEP_TYPE];
      const int cnt = (int)st[CS_STEP_CNT];
      const bool sends = type == CS_SEND || type == CS_RCS || type == CS_RRS || type == CS_RRCS;
      const bool receives = type == CS_RECV || type == CS_RCS || type == CS_RRS || type == CS_RRC || type == CS_RRCS;
      if (threadIdx.x == 0) {
        int kind = 0;
        const i64 dep = st[CS_STEP_DEP_BLOCK];
        if (dep >= 0 &&
            !wait_at_least(progress + dep, (u64)(t * st[CS_STEP_DEP_NSTEPS] + st[CS_STEP_DEP_STEP] + 1), dog))
          kind = CS_WAIT_DEP;
        if (kind == 0 && receives && !wait_at_least(tail + recv_conn, received + 1, dog)) kind = CS_WAIT_RECV;
        if (kind == 0 && sends && sent >= (u64)nslots &&
            !wait_at_least(head + send_conn, sent + 1 - (u64)nslots, dog))
          kind = CS_WAIT_SEND;
        if (kind != 0) {
          i64* row = status + (i64)b * CS_STATUS_COLS;
          row[0] = CS_STATE_STUCK;
          row[1] = t;
          row[2] = s;
          row[3] = kind;
        }
        stop = kind;
      }
      __syncthreads();
      if (stop != 0) return;

      Bits* src = st[CS_STEP_SRC] >= 0 ? data + st[CS_STEP_SRC] + offset : data;  // -1: the step has no such operand
      Bits* dst = st[CS_STEP_DST] >= 0 ? data + st[CS_STEP_DST] + offset : data;
      Bits* in_slot = recv_slots + (i64)(received % (u64)nslots) * slot_elems;
      Bits* out_slot = send_slots + (i64)(sent % (u64)nslots) * slot_elems;
      const i64 E = chunk_elems, P = piece_elems;
      switch (type) {
        case CS_SEND: move_pieces<R, false, false>(cnt, len, vec, src, E, 0, 0, out_slot, P, 0, 0); break;
        case CS_RECV: move_pieces<R, false, false>(cnt, len, vec, in_slot, P, 0, 0, dst, E, 0, 0); break;
        case CS_RCS: move_pieces<R, false, true>(cnt, len, vec, in_slot, P, 0, 0, dst, E, out_slot, P); break;
        case CS_RRS: move_pieces<R, true, false>(cnt, len, vec, in_slot, P, src, E, out_slot, P, 0, 0); break;
        case CS_RRC: move_pieces<R, true, false>(cnt, len, vec, in_slot, P, src, E, dst, E, 0, 0); break;
        case CS_RRCS: move_pieces<R, true, true>(cnt, len, vec, in_slot, P, src, E, dst, E, out_slot, P); break;
        case CS_CPY: move_pieces<R, false, false>(cnt, len, vec, src, E, 0, 0, dst, E, 0, 0); break;
        case CS_RE: move_pieces<R, true, false>(cnt, len, vec, dst, E, src, E, dst, E, 0, 0); break;
        default: break;  // nop: only its dependency
      }
      if (sends) ++sent;
      if (receives) ++received;
      const bool publish = st[CS_STEP_PUBLISH] != 0;
      // Every thread's reads and writes of this step are done before anyone is told, and before thread 0
      // reuses `stop` for the next step.
      __syncthreads();
      if (threadIdx.x == 0 && (sends || receives || publish)) {
        __threadfence();
        if (sends) st_release(tail + send_conn, sent);
        if (receives) st_release(head + recv_conn, received);
        if (publish) st_release(progress + b, (u64)(t * nsteps + s + 1));
      }
    }
  }
  if (threadIdx.x == 0) status[(i64)b * CS_STATUS_COLS] = CS_STATE_DONE;
}

#define CS_KERNEL(SUFFIX, OPNAME, DT, OP)                                                                    \
  extern "C" __global__ void __launch_bounds__(CS_MAX_THREADS)                                                \
      collsynth_interp_##SUFFIX##_##OPNAME(                                                                   \
          void* data, void* fifo, const i64* blocks, const i64* steps, const i64* conns, u64* tail, u64* head, \
          u64* progress, i64* status, unsigned int* abort_flag, i64 chunk_elems, i64 piece_elems, i64 ntiles, \
          i64 slot_elems, int nslots, int vectorize, u64 budget_ns) {                                         \
    typedef Reduce<DT, OP> R;                                                                                 \
    interpret<R>(static_cast<R::Bits*>(data), static_cast<R::Bits*>(fifo), blocks, steps, conns, tail, head,  \
                 progress, status, abort_flag, chunk_elems, piece_elems, ntiles, slot_elems, nslots, vectorize, \
                 budget_ns);                                                                                  \
  }

#define CS_KERNELS_FOR(SUFFIX, DT)          \
  CS_KERNEL(SUFFIX, sum, DT, CS_OP_SUM)     \
  CS_KERNEL(SUFFIX, prod, DT, CS_OP_PROD)   \
  CS_KERNEL(SUFFIX, max, DT, CS_OP_MAX)     \
  CS_KERNEL(SUFFIX, min, DT, CS_OP_MIN)

CS_KERNELS_FOR(f32, CS_DT_F32)
CS_KERNELS_FOR(f16, CS_DT_F16)
CS_KERNELS_FOR(bf16, CS_DT_BF16)
CS_KERNELS_FOR(i32, CS_DT_I32)
