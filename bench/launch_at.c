/* launch_at PROGRAM ARGS...: runs PROGRAM with every argument "@LAUNCH_NS@" replaced by
** CLOCK_MONOTONIC in ns, read just before the exec. The bench's cold start from exec: the
** Python harness's own fork and taskset's exec, the same for every client, are not counted. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: launch_at PROGRAM ARGS... (\"@LAUNCH_NS@\" becomes the time of the exec)\n");
        return 2;
    }
    char stamp[32];
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    snprintf(stamp, sizeof stamp, "%lld", (long long)t.tv_sec * 1000000000LL + t.tv_nsec);
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "@LAUNCH_NS@")) argv[i] = stamp;
    execv(argv[1], argv + 1);
    perror(argv[1]);
    return 127;
}
