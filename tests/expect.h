/* expect.h -- the tests' check: EXPECT(cond, printf-format, ...) counts every check and every
 * failure, and prints the first PL_EXPECT_LINES failures with file and line. */
#ifndef PL_TEST_EXPECT_H
#define PL_TEST_EXPECT_H

#include <stdio.h>

#define PL_EXPECT_LINES 60

static long long pl_checks, pl_failures;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    pl_checks++;                                                                                   \
    if (!(cond) && pl_failures++ < PL_EXPECT_LINES) {                                              \
      printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                  \
      printf(__VA_ARGS__);                                                                         \
      printf("\n");                                                                                \
    }                                                                                              \
  } while (0)

#endif
