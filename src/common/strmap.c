/* Open-addressing hash map from borrowed C strings to ints; see strmap.h. */
#include "common/strmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct strmap_slot {
  const char *key; /* NULL = empty */
  int value;
} strmap_slot;

struct strmap {
  strmap_slot *slots;
  size_t cap, used; /* cap is a power of two */
};

static uint64_t hash_string(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ull;
  return h;
}

strmap *strmap_create(size_t expected) {
  strmap *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  size_t cap = 16;
  while (cap < expected * 2) cap <<= 1;
  m->slots = calloc(cap, sizeof *m->slots);
  if (!m->slots) {
    free(m);
    return NULL;
  }
  m->cap = cap;
  return m;
}

void strmap_free(strmap *m) {
  if (!m) return;
  free(m->slots);
  free(m);
}

static strmap_slot *find_slot(strmap_slot *slots, size_t cap, const char *key) {
  size_t i = hash_string(key) & (cap - 1);
  while (slots[i].key && strcmp(slots[i].key, key)) i = (i + 1) & (cap - 1);
  return &slots[i];
}

static int grow(strmap *m) {
  size_t cap = m->cap * 2;
  strmap_slot *slots = calloc(cap, sizeof *slots);
  if (!slots) return -1;
  for (size_t i = 0; i < m->cap; i++)
    if (m->slots[i].key) *find_slot(slots, cap, m->slots[i].key) = m->slots[i];
  free(m->slots);
  m->slots = slots;
  m->cap = cap;
  return 0;
}

int strmap_put(strmap *m, const char *key, int value) {
  if ((m->used + 1) * 2 > m->cap && grow(m)) return -1;
  strmap_slot *s = find_slot(m->slots, m->cap, key);
  if (!s->key) {
    s->key = key;
    m->used++;
  }
  s->value = value;
  return 0;
}

int strmap_get(const strmap *m, const char *key) {
  const strmap_slot *s = find_slot(m->slots, m->cap, key);
  return s->key ? s->value : -1;
}
