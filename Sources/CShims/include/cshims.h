/* Small C helpers for things Swift cannot import: variadic calls, macros, GNU extensions. */
#ifndef SPC_CSHIMS_H
#define SPC_CSHIMS_H

/* Names the calling thread (at most 15 bytes are kept); shows in top -H and gdb. */
void speechclient_shim_set_thread_name(const char *name);

#endif
