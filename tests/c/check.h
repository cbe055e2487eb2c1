/* The C test programs' check macro: counts checks, reports a failing one with its place and a
 * printf-style message, and keeps going (main prints the totals and returns failures != 0). */
#ifndef TESTS_C_CHECK_H
#define TESTS_C_CHECK_H

#include <stdio.h>

static int failures;
static int checks;

#define CHECK(cond, ...)                                                                             \
  do {                                                                                               \
    checks++;                                                                                        \
    if (!(cond)) {                                                                                   \
      failures++;                                                                                    \
      fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond);                              \
      fprintf(stderr, __VA_ARGS__);                                                                  \
      fprintf(stderr, "\n");                                                                         \
    }                                                                                                \
  } while (0)

#endif
