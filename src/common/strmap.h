/* A string -> int map (open addressing) used to index values by name. Keys are not copied: they
 * must outlive the map (graph snapshots keep them in their arena). */
#ifndef EP_MLX_STRMAP_H
#define EP_MLX_STRMAP_H

#include <stddef.h>

typedef struct strmap strmap;

strmap *strmap_create(size_t expected);
void strmap_free(strmap *m); /* accepts NULL */
/* Inserts or replaces; 0 ok, -1 out of memory. */
int strmap_put(strmap *m, const char *key, int value);
/* The value, or -1 when absent. */
int strmap_get(const strmap *m, const char *key);

#endif
