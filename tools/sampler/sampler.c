/* A wall-clock sampling profiler for machines without perf (the lent GPU machine has none):
 * preloaded into a process, it interrupts the thread that loaded it every SAMPLER_US microseconds
 * of wall time (running or blocked: a decode step's time may be a wait on the GPU), records the
 * thread's call stack, and at exit writes where the time went to SAMPLER_OUT: the innermost
 * function of each sample ("self"), the innermost one outside libc (who waited or copied), every
 * function on the stack ("inclusive"), and by library. Names come from each library's own symbol
 * table where the file keeps one (MLX's wheel does: its internal functions are hidden from the
 * dynamic table), else from dladdr; C++ names are demangled.
 *
 *   cc -O2 -shared -fPIC -o /tmp/libsampler.so tools/sampler/sampler.c -ldl -lrt -pthread
 *   SAMPLER_OUT=/tmp/profile.txt LD_PRELOAD=/tmp/libsampler.so python3 bench/decode_probe.py ...
 *
 * SAMPLER_US (default 500) sets the interval; SAMPLER_TOP (default 40) the rows of each table.
 * SAMPLER_WAIT=1 samples only between the program's calls of sampler_start() and sampler_stop()
 * (exported: from Python, ctypes.CDLL(None).sampler_start()), so that a window such as a decode
 * loop is measured without the setup around it.
 * A tool for measuring, not part of the library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { MAX_SAMPLES = 1 << 16, MAX_DEPTH = 48, SKIP_FRAMES = 2 /* the handler and the signal return */ };

static void *frames[MAX_SAMPLES][MAX_DEPTH];
static int depths[MAX_SAMPLES];
static volatile int n_samples;
static timer_t timer;
static int active;

static void on_tick(int sig, siginfo_t *info, void *ctx) {
  (void)sig, (void)info, (void)ctx;
  int i = n_samples;
  if (i >= MAX_SAMPLES) return;
  depths[i] = backtrace(frames[i], MAX_DEPTH);
  n_samples = i + 1;
}

/* ---- the report ----------------------------------------------------------------------------- */

typedef struct entry {
  char *name;
  long self, incl, seen_in; /* seen_in: the last sample counted in incl */
} entry;

typedef struct table {
  entry *e;
  int n, cap;
} table;

static entry *table_get(table *t, const char *name) {
  for (int i = 0; i < t->n; i++)
    if (!strcmp(t->e[i].name, name)) return &t->e[i];
  if (t->n == t->cap) {
    t->cap = t->cap ? 2 * t->cap : 256;
    t->e = realloc(t->e, sizeof *t->e * (size_t)t->cap);
    if (!t->e) return NULL;
  }
  t->e[t->n] = (entry){.name = strdup(name), .seen_in = -1};
  return &t->e[t->n++];
}

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

/* A library's .symtab functions, sorted by address (relative to the load base). */
typedef struct func_sym {
  uint64_t start, size;
  const char *name;
} func_sym;

typedef struct lib_syms {
  char *path;
  func_sym *syms;
  int n;
  char *strings;
} lib_syms;

static lib_syms *loaded;
static int n_loaded;

static int by_start(const void *a, const void *b) {
  uint64_t x = ((const func_sym *)a)->start, y = ((const func_sym *)b)->start;
  return x < y ? -1 : x > y;
}

static int read_at(FILE *f, long off, void *buf, size_t n) {
  return fseek(f, off, SEEK_SET) == 0 && fread(buf, 1, n, f) == n ? 0 : -1;
}

/* The file's SHT_SYMTAB functions (64-bit ELF); an empty table when it has none. */
static void load_symtab(lib_syms *l) {
  FILE *f = fopen(l->path, "rb");
  Elf64_Ehdr eh;
  if (!f) return;
  if (read_at(f, 0, &eh, sizeof eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_shentsize != sizeof(Elf64_Shdr)) {
    fclose(f);
    return;
  }
  Elf64_Shdr *sh = calloc(eh.e_shnum ? eh.e_shnum : 1, sizeof *sh);
  if (!sh || read_at(f, (long)eh.e_shoff, sh, sizeof *sh * eh.e_shnum)) goto done;
  for (int i = 0; i < eh.e_shnum; i++) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh.e_shnum) continue;
    Elf64_Shdr *strs = &sh[sh[i].sh_link];
    size_t count = sh[i].sh_size / sizeof(Elf64_Sym);
    Elf64_Sym *syms = malloc(sh[i].sh_size ? sh[i].sh_size : 1);
    l->strings = malloc(strs->sh_size + 1);
    l->syms = calloc(count ? count : 1, sizeof *l->syms);
    if (!syms || !l->strings || !l->syms || read_at(f, (long)sh[i].sh_offset, syms, sh[i].sh_size) ||
        read_at(f, (long)strs->sh_offset, l->strings, strs->sh_size)) {
      free(syms);
      break;
    }
    l->strings[strs->sh_size] = '\0';
    for (size_t k = 0; k < count; k++)
      if (ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC && syms[k].st_value && syms[k].st_name < strs->sh_size)
        l->syms[l->n++] = (func_sym){syms[k].st_value, syms[k].st_size, l->strings + syms[k].st_name};
    free(syms);
    qsort(l->syms, (size_t)l->n, sizeof *l->syms, by_start);
    break;
  }
done:
  free(sh);
  fclose(f);
}

static const char *symtab_name(const char *path, uint64_t rel) {
  lib_syms *l = NULL;
  for (int i = 0; i < n_loaded && !l; i++)
    if (!strcmp(loaded[i].path, path)) l = &loaded[i];
  if (!l) {
    lib_syms *grown = realloc(loaded, sizeof *loaded * (size_t)(n_loaded + 1));
    if (!grown) return NULL;
    loaded = grown;
    l = &loaded[n_loaded++];
    *l = (lib_syms){.path = strdup(path)};
    if (l->path) load_symtab(l);
  }
  int lo = 0, hi = l->n - 1, best = -1;
  while (lo <= hi) { /* the last function starting at or before rel */
    int mid = (lo + hi) / 2;
    if (l->syms[mid].start <= rel) best = mid, lo = mid + 1;
    else hi = mid - 1;
  }
  if (best < 0) return NULL;
  const func_sym *f = &l->syms[best];
  return rel < f->start + (f->size ? f->size : 1) ? f->name : NULL;
}

static void frame_names(void *addr, char *fn, size_t fn_len, char *lib, size_t lib_len) {
  static demangle_fn demangle;
  static int looked;
  if (!looked) {
    demangle = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    looked = 1;
  }
  Dl_info info;
  snprintf(fn, fn_len, "%p", addr);
  snprintf(lib, lib_len, "?");
  if (!dladdr(addr, &info)) return;
  if (info.dli_fname) {
    const char *base = strrchr(info.dli_fname, '/');
    snprintf(lib, lib_len, "%s", base ? base + 1 : info.dli_fname);
  }
  const char *name = info.dli_fname ? symtab_name(info.dli_fname, (uint64_t)((char *)addr - (char *)info.dli_fbase))
                                    : NULL;
  if (!name) name = info.dli_sname;
  if (!name) {
    snprintf(fn, fn_len, "[%s]", lib);
    return;
  }
  int status = -1;
  char *plain = demangle ? demangle(name, NULL, NULL, &status) : NULL;
  snprintf(fn, fn_len, "%s", status == 0 && plain ? plain : name);
  free(plain);
}

static int by_self(const void *a, const void *b) {
  long d = ((const entry *)b)->self - ((const entry *)a)->self;
  return d > 0 ? 1 : d < 0 ? -1 : 0;
}

static int by_incl(const void *a, const void *b) {
  long d = ((const entry *)b)->incl - ((const entry *)a)->incl;
  return d > 0 ? 1 : d < 0 ? -1 : 0;
}

static void print_table(FILE *out, const char *title, table *t, int self, int top, int n) {
  qsort(t->e, (size_t)t->n, sizeof *t->e, self ? by_self : by_incl);
  fprintf(out, "\n%s (%% of %d samples)\n", title, n);
  for (int i = 0; i < t->n && i < top; i++) {
    long v = self ? t->e[i].self : t->e[i].incl;
    if (!v) break;
    fprintf(out, "%6.2f%%  %.180s\n", 100.0 * (double)v / n, t->e[i].name);
  }
}

static void count(table *t, const char *name, int sample, int innermost) {
  entry *e = table_get(t, name);
  if (!e) return;
  if (innermost) e->self++;
  if (e->seen_in != sample) {
    e->incl++;
    e->seen_in = sample;
  }
}

/* "f <- caller <- its caller", each name cut to 96 characters: who a hot function's time is for. */
static void caller_chain(void *const *stack, int depth, int k, const char *innermost, char *out, size_t len) {
  char fn[1024], lib[256];
  snprintf(out, len, "%.96s", innermost);
  for (int up = k + 1; up < depth && up <= k + 2; up++) {
    frame_names((char *)stack[up] - 1, fn, sizeof fn, lib, sizeof lib);
    size_t used = strlen(out);
    snprintf(out + used, len - used, " <- %.96s", fn);
  }
}

static char report_path[4096];

static void write_report(void) {
  const char *path = report_path;
  const char *top_s = getenv("SAMPLER_TOP");
  int top = top_s ? atoi(top_s) : 40;
  /* Every process started under the preload samples: a wrapper that execs (pyenv's shim, env) or a
   * helper the program starts. One that took no samples (SAMPLER_WAIT=1 and no window of its own)
   * leaves the report to the one that did. */
  FILE *out = n_samples ? fopen(path, "w") : NULL;
  if (!out) return;
  table fns = {0}, libs = {0}, outside = {0}, chains = {0};
  char fn[1024], lib[256], chain[3 * 100 + 16];
  int n = n_samples;
  for (int s = 0; s < n; s++) {
    int found = 0;
    for (int k = SKIP_FRAMES; k < depths[s]; k++) {
      /* a return address points after the call: look up the byte before it */
      void *addr = k == SKIP_FRAMES ? frames[s][k] : (char *)frames[s][k] - 1;
      frame_names(addr, fn, sizeof fn, lib, sizeof lib);
      count(&fns, fn, s, k == SKIP_FRAMES);
      count(&libs, lib, s, k == SKIP_FRAMES);
      /* waits and copies end in libc: who called it */
      if (!found && strncmp(lib, "libc.so", 7) && strncmp(lib, "libpthread", 10) && strncmp(lib, "ld-linux", 8)) {
        count(&outside, fn, s, 1);
        caller_chain(frames[s], depths[s], k, fn, chain, sizeof chain);
        count(&chains, chain, s, 1);
        found = 1;
      }
    }
  }
  fprintf(out, "sampler: %d samples of the main thread's wall time%s\n", n,
          n >= MAX_SAMPLES ? " (buffer full: the rest of the run is not sampled)" : "");
  print_table(out, "self, by library", &libs, 1, top, n);
  print_table(out, "self, by function", &fns, 1, top, n);
  print_table(out, "self, by the innermost function outside libc", &outside, 1, top, n);
  print_table(out, "self, by that function and its two callers", &chains, 1, top, n);
  print_table(out, "inclusive, by function", &fns, 0, top, n);
  fclose(out);
}

static struct itimerspec interval(long us) {
  struct itimerspec its = {.it_interval = {us / 1000000, (us % 1000000) * 1000},
                           .it_value = {us / 1000000, (us % 1000000) * 1000}};
  return its;
}

/* Installed again at each start, and SIGPROF unblocked: a library loaded since (a runtime's thread
 * pool, a profiler of its own) may have taken the signal or masked it on this thread. */
static int install_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_tick;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGPROF, &sa, NULL)) return -1;
  sigset_t prof;
  sigemptyset(&prof);
  sigaddset(&prof, SIGPROF);
  return pthread_sigmask(SIG_UNBLOCK, &prof, NULL) ? -1 : 0;
}

void sampler_start(void) {
  if (!active || install_handler()) return;
  const char *us_s = getenv("SAMPLER_US");
  long us = us_s ? atol(us_s) : 500;
  struct itimerspec its = interval(us < 50 ? 50 : us);
  timer_settime(timer, 0, &its, NULL);
}

void sampler_stop(void) {
  if (!active) return;
  struct itimerspec off = interval(0);
  timer_settime(timer, 0, &off, NULL);
}

static void stop(void) {
  if (!active) return;
  active = 0;
  timer_delete(timer);
  signal(SIGPROF, SIG_IGN);
  write_report();
}

__attribute__((constructor)) static void start(void) {
  const char *path = getenv("SAMPLER_OUT");
  if (!path || strlen(path) >= sizeof report_path) return;
  strcpy(report_path, path);
  void *warm[4];
  backtrace(warm, 4); /* loads the unwinder now, not inside the first signal */
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGPROF;
  ev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
  if (timer_create(CLOCK_MONOTONIC, &ev, &timer)) return;
  active = 1;
  atexit(stop);
  const char *wait = getenv("SAMPLER_WAIT");
  if (!wait || strcmp(wait, "1")) sampler_start();
}
