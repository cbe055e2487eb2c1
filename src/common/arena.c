/* Bump allocator over a chain of blocks; see arena.h. */
#include "common/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct arena_block {
  struct arena_block *next; /* older block */
  size_t used, cap;         /* bytes used / available in data */
  _Alignas(16) unsigned char data[];
} arena_block;

struct arena {
  arena_block *head; /* newest block */
};

enum { ARENA_BLOCK_MIN = 64 * 1024 };

arena *arena_create(void) { return calloc(1, sizeof(arena)); }

void arena_free(arena *a) {
  if (!a) return;
  arena_block *b = a->head;
  while (b) {
    arena_block *next = b->next;
    free(b);
    b = next;
  }
  free(a);
}

void *arena_alloc(arena *a, size_t bytes) {
  size_t need = (bytes + 15u) & ~(size_t)15u;
  if (need == 0) need = 16;
  arena_block *b = a->head;
  if (!b || b->cap - b->used < need) {
    size_t cap = need > ARENA_BLOCK_MIN ? need : ARENA_BLOCK_MIN;
    arena_block *nb = malloc(sizeof(arena_block) + cap);
    if (!nb) return NULL;
    nb->next = a->head;
    nb->used = 0;
    nb->cap = cap;
    a->head = nb;
    b = nb;
  }
  void *p = b->data + b->used;
  b->used += need;
  memset(p, 0, need);
  return p;
}

void *arena_memdup(arena *a, const void *src, size_t bytes) {
  void *p = arena_alloc(a, bytes);
  if (p && bytes) memcpy(p, src, bytes);
  return p;
}

char *arena_strdup(arena *a, const char *s) {
  if (!s) return NULL;
  return arena_memdup(a, s, strlen(s) + 1);
}
