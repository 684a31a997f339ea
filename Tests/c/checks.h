/* The checks of the C suites: each is counted, and a failed one printed with its file, line
** and condition (CHECKF adds what was found). Included once per test program. */
#ifndef SPEECHCLIENT_TEST_CHECKS_H
#define SPEECHCLIENT_TEST_CHECKS_H

#include <stdio.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        checks++;                                                                   \
        if (!(cond)) {                                                              \
            failures++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                           \
    } while (0)

#define CHECK_STATUS(expr, expected) CHECK((expr) == (expected))

#define CHECKF(cond, ...)                                                           \
    do {                                                                            \
        checks++;                                                                   \
        if (!(cond)) {                                                              \
            failures++;                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                           \
            fputc('\n', stderr);                                                    \
        }                                                                           \
    } while (0)

#endif
