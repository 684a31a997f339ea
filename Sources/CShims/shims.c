#define _GNU_SOURCE
#include <pthread.h>
#include <string.h>
#include "cshims.h"

void speechclient_shim_set_thread_name(const char *name) {
    char buf[16];
    strncpy(buf, name, sizeof buf - 1);
    buf[sizeof buf - 1] = '\0';
    pthread_setname_np(pthread_self(), buf);
}
