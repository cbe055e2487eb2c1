/* The per-plan signature cache: a small LRU list of input signatures, each holding the values
 * that input shapes and constants determine and, in compile mode, the compiled MLX program.
 * Entries are reference counted so a Run can keep using one while another Run evicts it. */
#include <stdlib.h>
#include <string.h>

#include "runtime/plan_internal.h"

void host_values_free(host_value *h, int n) {
  if (!h) return;
  for (int i = 0; i < n; i++) free(h[i].ints);
  free(h);
}

void sig_key_make(const rt_tensor *inputs, int n, int64_t *k, int *len, uint64_t *hash) {
  int total = 0;
  for (int i = 0; i < n; i++) total += 2 + inputs[i].rank;
  int pos = 0;
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < n; i++) {
    k[pos++] = inputs[i].dtype;
    k[pos++] = inputs[i].rank;
    for (int d = 0; d < inputs[i].rank; d++) k[pos++] = inputs[i].dims[d];
  }
  for (int i = 0; i < total; i++) h = (h ^ (uint64_t)k[i]) * 1099511628211ull;
  *len = total;
  *hash = h;
}

static void entry_free(plan *p, sig_entry *e) {
  mlxb_program_free(e->program);
  mlxb_program_free(e->alias_program);
  free(e->alias_map);
  free(e->out_shapes);
  free(e->trace_error);
  check_list_free(&e->checks);
  host_values_free(e->host, p->g->n_values);
  free(e->key);
  free(e);
}

static void entry_unref_locked(plan *p, sig_entry *e) {
  if (--e->refs == 0) entry_free(p, e);
}

sig_entry *sig_lookup(plan *p, const int64_t *key, int len, uint64_t hash) {
  pthread_mutex_lock(&p->lock);
  sig_entry *prev = NULL, *e = p->lru;
  while (e && !(e->hash == hash && e->key_len == len && !memcmp(e->key, key, sizeof *key * (size_t)len))) {
    prev = e;
    e = e->next;
  }
  if (e) {
    if (prev) { /* move to the front */
      prev->next = e->next;
      e->next = p->lru;
      p->lru = e;
    }
    e->refs++;
  }
  pthread_mutex_unlock(&p->lock);
  return e;
}

sig_entry *sig_insert(plan *p, const int64_t *key, int len, uint64_t hash, host_value *host, int64_t *out_shapes) {
  sig_entry *e = calloc(1, sizeof *e);
  int64_t *copy = malloc(sizeof *copy * (size_t)(len ? len : 1));
  if (!e || !copy) {
    free(e);
    free(copy);
    free(out_shapes);
    host_values_free(host, p->g->n_values);
    return NULL;
  }
  e->out_shapes = out_shapes;
  memcpy(copy, key, sizeof *copy * (size_t)len);
  e->owner = p;
  e->key = copy;
  e->key_len = len;
  e->hash = hash;
  e->host = host;
  e->refs = 2; /* the list and the caller */
  pthread_mutex_lock(&p->lock);
  e->next = p->lru;
  p->lru = e;
  p->n_entries++;
  if (p->n_entries > p->cfg.cache_size) { /* drop the least recently used */
    sig_entry **pp = &p->lru;
    while ((*pp)->next) pp = &(*pp)->next;
    sig_entry *old = *pp;
    *pp = NULL;
    p->n_entries--;
    PLAN_STAT_ADD(p, evictions, 1);
    entry_unref_locked(p, old);
  }
  pthread_mutex_unlock(&p->lock);
  return e;
}

void sig_release(plan *p, sig_entry *e) {
  if (!e) return;
  pthread_mutex_lock(&p->lock);
  entry_unref_locked(p, e);
  pthread_mutex_unlock(&p->lock);
}

void sig_cache_clear(plan *p) {
  pthread_mutex_lock(&p->lock);
  sig_entry *e = p->lru;
  p->lru = NULL;
  p->n_entries = 0;
  while (e) {
    sig_entry *next = e->next;
    entry_unref_locked(p, e);
    e = next;
  }
  pthread_mutex_unlock(&p->lock);
}
