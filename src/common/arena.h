/* A bump allocator: many small allocations, one free. Graph snapshots and plans keep all their
 * strings and arrays in one arena so that ownership is a single pointer. */
#ifndef EP_MLX_ARENA_H
#define EP_MLX_ARENA_H

#include <stddef.h>

typedef struct arena arena;

arena *arena_create(void);
void arena_free(arena *a); /* accepts NULL */
/* Zeroed, 16-byte aligned memory that lives until arena_free; NULL when out of memory. */
void *arena_alloc(arena *a, size_t bytes);
void *arena_memdup(arena *a, const void *src, size_t bytes);
char *arena_strdup(arena *a, const char *s); /* NULL stays NULL */

#endif
