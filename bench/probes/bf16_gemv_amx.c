// Read rates of a bf16 matrix-vector product on AMX tiles against plain streaming reads of the
// same bytes, on one thread or several: what bounds bf16 decode on an AMX Xeon
// (docs/performance.md, "AMX Xeon, 2026-12-06 (eighth session)", "(ninth session)" and
// "AMX Xeon, 2026-12-07: bf16r32").
//
//   gcc -O2 -march=sapphirerapids -pthread -o /tmp/bf16_gemv_amx bench/probes/bf16_gemv_amx.c
//   /tmp/bf16_gemv_amx [COLS=2048] [PASSES=9] [MIB=512] [THREADS=1]
//   MATMIB=4 /tmp/bf16_gemv_amx ...   (the buffer as MATMIB-MiB matrices read in random order)
//
// A MIB-MiB matrix of COLS-column bf16 rows in 2 MiB pages (MADV_HUGEPAGE), read once per
// variant per pass, each thread a contiguous share of the rows (with MATMIB, every THREADS-th
// matrix of a shuffled order); printed are the median and best GB/s of wall time, and the
// median's ratio to the first variant (the bench probe's kind of loop: 16-byte loads, four per
// line). The products compute nothing useful (timing only); each reads every byte once:
//   sum xmm        four 16-byte loads per 64-byte line, one sequential stream
//   sum zmm        one 64-byte load per line
//   sum zmm+pf     the same with a prefetch 512 bytes ahead
//   amx rows       the decode shape colibri runs: 32 weight rows per block (two A tiles of 16
//                  rows × 64 bytes, rows COLS·2 bytes apart), one activation row (C 16 × 1)
//   amx rows16+pf  16 rows per block, each row's line four steps ahead prefetched
//   amx tiles      the same bytes in tile order (per 32-row group and 32-column step, 2 KiB:
//                  tile 0's 16 rows × 64 bytes, then tile 1's), loads 64 bytes apart
//   amx tiles+pf   the same with the next 32 lines prefetched 512 bytes ahead
//   amx diag+pf    row-major bytes read one weight row at a time, one stream: an A tile is 16
//                  consecutive 64-byte lines of one row (16 column steps), B the activation's
//                  same 16 steps as its 16 columns, so C's diagonal holds each step's sum (the
//                  tile GEMM's per-step sums; the rest of C is unused); C zeroed per tile, its
//                  diagonal chained in column order; 16 lines prefetched 512 bytes ahead
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
typedef struct { uint8_t palette, start, res[14]; uint16_t colsb[16]; uint8_t rows[16]; } tilecfg;

static int rows, cols;
static __thread int r0, r1; /* the calling thread's rows */

static uint64_t sum_xmm(const char *p, size_t n) {
  __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
  for (size_t i = 0; i < n; i += 64) {
    a = _mm_add_epi64(a, _mm_load_si128((const void *)(p + i)));
    b = _mm_add_epi64(b, _mm_load_si128((const void *)(p + i + 16)));
    c = _mm_add_epi64(c, _mm_load_si128((const void *)(p + i + 32)));
    d = _mm_add_epi64(d, _mm_load_si128((const void *)(p + i + 48)));
  }
  a = _mm_add_epi64(_mm_add_epi64(a, b), _mm_add_epi64(c, d));
  return (uint64_t)_mm_extract_epi64(a, 0) + (uint64_t)_mm_extract_epi64(a, 1);
}
static uint64_t sum_zmm(const char *p, size_t n, int pf) {
  __m512i a = _mm512_setzero_si512(), b = a;
  for (size_t i = 0; i < n; i += 128) {
    if (pf) { _mm_prefetch(p + i + 512, _MM_HINT_T0); _mm_prefetch(p + i + 576, _MM_HINT_T0); }
    a = _mm512_add_epi64(a, _mm512_load_si512((const void *)(p + i)));
    b = _mm512_add_epi64(b, _mm512_load_si512((const void *)(p + i + 64)));
  }
  return (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(a, b));
}
static void amx_rows(const char *w, const uint16_t *x, float *y) {
  for (int r = r0; r < r1; r += 32) {
    _tile_zero(0); _tile_zero(1);
    const char *a0 = w + (size_t)r * cols * 2, *a1 = a0 + (size_t)16 * cols * 2;
    for (int s = 0; s < cols / 32; s++) {
      _tile_loadd(4, a0 + s * 64, cols * 2); _tile_loadd(5, a1 + s * 64, cols * 2);
      _tile_loadd(6, x + s * 32, 4);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 5, 6);
    }
    _tile_stored(0, y + r, 4); _tile_stored(1, y + r + 16, 4);
  }
}
static void amx_rows16(const char *w, const uint16_t *x, float *y) {
  for (int r = r0; r < r1; r += 16) {
    _tile_zero(0);
    const char *a = w + (size_t)r * cols * 2;
    for (int s = 0; s < cols / 32; s++) {
      if (s + 4 < cols / 32)
        for (int i = 0; i < 16; i++) _mm_prefetch(a + (size_t)i * cols * 2 + (s + 4) * 64, _MM_HINT_T0);
      _tile_loadd(4, a + s * 64, cols * 2);
      _tile_loadd(6, x + s * 32, 4);
      _tile_dpbf16ps(0, 4, 6);
    }
    _tile_stored(0, y + r, 4);
  }
}
static void amx_tiles(const char *w, const uint16_t *x, float *y, int pf) {
  for (int r = r0; r < r1; r += 32) {
    _tile_zero(0); _tile_zero(1);
    const char *g = w + (size_t)r * cols * 2;
    for (int s = 0; s < cols / 32; s++) {
      const char *t = g + (size_t)s * 2048;
      if (pf)
        for (int i = 0; i < 32; i++) _mm_prefetch(t + 512 + i * 64, _MM_HINT_T0);
      _tile_loadd(4, t, 64); _tile_loadd(5, t + 1024, 64);
      _tile_loadd(6, x + s * 32, 4);
      _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 5, 6);
    }
    _tile_stored(0, y + r, 4); _tile_stored(1, y + r + 16, 4);
  }
}

static uint32_t *xdiag;
/* B tile t: row q (pair), column n = pair q of step 16t + n */
static void pack_diag(const uint16_t *x) {
  for (int t = 0; t < cols / 512; t++)
    for (int q = 0; q < 16; q++)
      for (int n = 0; n < 16; n++) {
        int c = 512 * t + 32 * n + 2 * q;
        xdiag[(t * 16 + q) * 16 + n] = (uint32_t)x[c] | (uint32_t)x[c + 1] << 16;
      }
}
static void amx_diag(const char *w, float *y) {
  float c[256] __attribute__((aligned(64)));
  for (int r = r0; r < r1; r++) {
    const char *a = w + (size_t)r * cols * 2;
    float s = 0;
    for (int t = 0; t < cols / 512; t++) {
      const char *at = a + t * 1024;
      for (int i = 0; i < 16; i++) _mm_prefetch(at + 512 + i * 64, _MM_HINT_T0);
      _tile_zero(2);
      _tile_loadd(4, at, 64);
      _tile_loadd(3, xdiag + t * 256, 64);
      _tile_dpbf16ps(2, 4, 3);
      _tile_stored(2, c, 64);
      for (int i = 0; i < 16; i++) s += c[i * 17];
    }
    y[r] = s;
  }
}

enum { VARIANTS = 8, MAXPASS = 64 };
static const char *names[VARIANTS] = {"sum xmm", "sum zmm", "sum zmm+pf", "amx rows", "amx rows16+pf", "amx tiles", "amx tiles+pf", "amx diag+pf"};

static int by_value(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }


static int nthreads; static char *W; static uint16_t *X; static float *Y;
static pthread_barrier_t bar; static volatile int variant; static uint64_t sinks[64];
static tilecfg cfg;
static int mat_rows, n_mats, *order;
static void one(int v, int id, const char *base, int rr0, int rr1) {
  r0 = rr0; r1 = rr1;
  const char *p = base + (size_t)r0 * cols * 2; size_t n = (size_t)(r1 - r0) * cols * 2;
  switch (v) {
  case 0: sinks[id] += sum_xmm(p, n); break;
  case 1: sinks[id] += sum_zmm(p, n, 0); break;
  case 2: sinks[id] += sum_zmm(p, n, 1); break;
  case 3: amx_rows(base, X, Y); break;
  case 4: amx_rows16(base, X, Y); break;
  case 5: amx_tiles(base, X, Y, 0); break;
  case 6: amx_tiles(base, X, Y, 1); break;
  case 7: amx_diag(base, Y); break;
  }
}
static void run_variant(int v, int id) {
  if (mat_rows) {
    for (int i = id; i < n_mats; i += nthreads) one(v, id, W + (size_t)order[i] * mat_rows * cols * 2, 0, mat_rows);
    return;
  }
  int per = rows / 32 / nthreads * 32;
  one(v, id, W, id * per, id == nthreads - 1 ? rows : (id + 1) * per);
}
static void *worker(void *arg) {
  int id = (int)(long)arg;
  _tile_loadconfig(&cfg);
  for (;;) { pthread_barrier_wait(&bar); int v = variant; if (v < 0) break; run_variant(v, id); pthread_barrier_wait(&bar); }
  return 0;
}
static double wall(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)) { perror("AMX permission"); return 1; }
  cols = argc > 1 ? atoi(argv[1]) : 2048;
  int passes = argc > 2 ? atoi(argv[2]) : 9;
  size_t bytes = (size_t)(argc > 3 ? atol(argv[3]) : 512) << 20;
  nthreads = argc > 4 ? atoi(argv[4]) : 1;
  if (cols <= 0 || cols % 512 || passes < 1 || passes > MAXPASS) { fprintf(stderr, "COLS a multiple of 512, 1 <= PASSES <= %d\n", MAXPASS); return 2; }
  if (nthreads < 1 || nthreads > 64) { fprintf(stderr, "1 <= THREADS <= 64\n"); return 2; }
  rows = (int)(bytes / 2 / cols) / 32 * 32 / nthreads * nthreads;
  rows = rows / (32 * nthreads) * 32 * nthreads;
  bytes = (size_t)rows * cols * 2;
  tilecfg c; memset(&c, 0, sizeof c); c.palette = 1;
  for (int t = 0; t < 2; t++) { c.colsb[t] = 4; c.rows[t] = 16; }
  for (int t = 4; t < 6; t++) { c.colsb[t] = 64; c.rows[t] = 16; }
  c.colsb[6] = 4; c.rows[6] = 16;
  c.colsb[2] = 64; c.rows[2] = 16; c.colsb[3] = 64; c.rows[3] = 16;
  cfg = c;
  char *w = aligned_alloc(2 << 20, (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20));
  madvise(w, bytes, MADV_HUGEPAGE);
  for (size_t i = 0; i < bytes / 2; i++) ((uint16_t *)w)[i] = (uint16_t)(0x3c00 + ((i * 2654435761u) >> 25 & 0x7f));
  uint16_t *x = aligned_alloc(64, (size_t)cols * 2);
  for (int i = 0; i < cols; i++) x[i] = (uint16_t)(0x3c00 + (i & 0x3f));
  float *y = aligned_alloc(64, (size_t)rows * 4);
  xdiag = aligned_alloc(64, (size_t)cols * 2);
  pack_diag(x);
  W = w; X = x; Y = y;
  if (getenv("MATMIB")) {
    mat_rows = (int)(((size_t)atoi(getenv("MATMIB")) << 20) / 2 / cols) / 32 * 32;
    n_mats = rows / mat_rows; order = malloc(n_mats * sizeof(int));
    for (int i = 0; i < n_mats; i++) order[i] = i;
    srand(7); for (int i = n_mats - 1; i > 0; i--) { int j = rand() % (i + 1), t = order[i]; order[i] = order[j]; order[j] = t; }
    bytes = (size_t)n_mats * mat_rows * cols * 2;
    printf("%d matrices of %d rows, random order\n", n_mats, mat_rows);
  }
  pthread_barrier_init(&bar, 0, nthreads + 1);
  pthread_t th[64];
  for (int i = 0; i < nthreads; i++) pthread_create(&th[i], 0, worker, (void *)(long)i);
  static double rate[VARIANTS][MAXPASS];
  for (int p = 0; p < passes; p++)
    for (int v = 0; v < VARIANTS; v++) {
      variant = v;
      double t0 = wall();
      pthread_barrier_wait(&bar); pthread_barrier_wait(&bar);
      rate[v][p] = bytes / (wall() - t0) / 1e9;
    }
  variant = -1; pthread_barrier_wait(&bar);
  printf("%d x %d bf16 (%zu MiB), %d passes, %d threads, GB/s wall\n", rows, cols, bytes >> 20, passes, nthreads);
  double base = 0;
  for (int v = 0; v < VARIANTS; v++) {
    qsort(rate[v], passes, sizeof(double), by_value);
    double med = rate[v][passes / 2];
    if (v == 0) base = med;
    printf("%-14s median %6.2f  best %6.2f  median / sum xmm %.2f\n", names[v], med, rate[v][passes - 1], med / base);
  }
  return 0;
}
