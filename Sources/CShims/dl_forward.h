/* Forwarders to a library opened with dlopen on first use (alsa_loader.c, openssl_loader.c):
** each defines a function under the library's own name that calls the loaded one, found by
** `lookup` (a function of the symbol's name returning its address, NULL when there is none). */
#ifndef SPEECHCLIENT_DL_FORWARD_H
#define SPEECHCLIENT_DL_FORWARD_H

/* Defines `name` forwarding to the loaded function; `fail` when there is none. The pointer is
** looked up once (every thread finds the same one, so a race only repeats the lookup). */
#define DL_FORWARD(lookup, ret, name, params, args, fail)                    \
    ret name params {                                                        \
        static ret (*loaded) params;                                         \
        ret (*fn) params = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);       \
        if (!fn) {                                                           \
            fn = (ret (*) params)lookup(#name);                              \
            if (!fn) return fail;                                            \
            __atomic_store_n(&loaded, fn, __ATOMIC_RELEASE);                 \
        }                                                                    \
        return fn args;                                                      \
    }

/* The same for a function that returns nothing. */
#define DL_FORWARD_VOID(lookup, name, params, args)                          \
    void name params {                                                       \
        static void (*loaded) params;                                        \
        void (*fn) params = __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);      \
        if (!fn) {                                                           \
            fn = (void (*) params)lookup(#name);                             \
            if (!fn) return;                                                 \
            __atomic_store_n(&loaded, fn, __ATOMIC_RELEASE);                 \
        }                                                                    \
        fn args;                                                             \
    }

#endif
