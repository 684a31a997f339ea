/* ALSA, loaded when first needed (issue 22). The library does not link libasound: a wheel or a
** container without ALSA still transcribes files, pipes and pushed audio, and a microphone says
** which package is missing. ALSA's plugins and configuration live in the system, so its library
** is never bundled either: the system's libasound.so.2 is opened with dlopen on the first call.
**
** Each ALSA function the library uses is defined here under its own name and forwards to the
** loaded one; the definitions are local to libspeechclient (its version script exports spc_*
** only), so an application that links ALSA itself keeps its own. When libasound.so.2 cannot be
** opened, or lacks a function, the call fails with -ENOSYS (NULL, or a message, where the
** function returns a pointer); speechclient_shim_alsa_unavailable() says why, for the error. */
#define _GNU_SOURCE
#include <alsa/asoundlib.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#include "cshims.h"
#include "dl_forward.h"

static void *alsa_library;
static pthread_once_t alsa_once = PTHREAD_ONCE_INIT;
static char alsa_problem[512];

static void alsa_open(void) {
    alsa_library = dlopen("libasound.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!alsa_library) {
        const char *why = dlerror();
        snprintf(alsa_problem, sizeof alsa_problem,
                 "ALSA is not installed (%s): install the libasound2 package (Debian, Ubuntu), alsa-lib "
                 "(Fedora, Arch) or alsa-lib on Alpine to use a microphone; files, pipes and pushed audio "
                 "work without it", why ? why : "libasound.so.2 not found");
    }
}

const char *speechclient_shim_alsa_unavailable(void) {
    pthread_once(&alsa_once, alsa_open);
    return alsa_library ? NULL : alsa_problem;
}

static void *alsa_symbol(const char *name) {
    pthread_once(&alsa_once, alsa_open);
    return alsa_library ? dlsym(alsa_library, name) : NULL;
}

#define ALSA_FORWARD(ret, name, params, args, fail) DL_FORWARD(alsa_symbol, ret, name, params, args, fail)

ALSA_FORWARD(int, snd_pcm_open, (snd_pcm_t **pcm, const char *name, snd_pcm_stream_t stream, int mode),
             (pcm, name, stream, mode), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_close, (snd_pcm_t *pcm), (pcm), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_drop, (snd_pcm_t *pcm), (pcm), -ENOSYS)
ALSA_FORWARD(snd_pcm_type_t, snd_pcm_type, (snd_pcm_t *pcm), (pcm), SND_PCM_TYPE_HW)
ALSA_FORWARD(snd_pcm_sframes_t, snd_pcm_readi, (snd_pcm_t *pcm, void *buffer, snd_pcm_uframes_t size),
             (pcm, buffer, size), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_recover, (snd_pcm_t *pcm, int err, int silent), (pcm, err, silent), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_poll_descriptors_count, (snd_pcm_t *pcm), (pcm), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_poll_descriptors, (snd_pcm_t *pcm, struct pollfd *pfds, unsigned int space),
             (pcm, pfds, space), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_poll_descriptors_revents,
             (snd_pcm_t *pcm, struct pollfd *pfds, unsigned int nfds, unsigned short *revents),
             (pcm, pfds, nfds, revents), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_malloc, (snd_pcm_hw_params_t **ptr), (ptr), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_any, (snd_pcm_t *pcm, snd_pcm_hw_params_t *params), (pcm, params), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params, (snd_pcm_t *pcm, snd_pcm_hw_params_t *params), (pcm, params), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_set_access,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, snd_pcm_access_t access), (pcm, params, access), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_test_format,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, snd_pcm_format_t val), (pcm, params, val), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_set_format,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, snd_pcm_format_t format), (pcm, params, format), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_set_channels_near,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, unsigned int *val), (pcm, params, val), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_set_rate_near,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, unsigned int *val, int *dir), (pcm, params, val, dir), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_set_rate_resample,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, unsigned int val), (pcm, params, val), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_set_period_time_near,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, unsigned int *val, int *dir), (pcm, params, val, dir), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_set_buffer_time_near,
             (snd_pcm_t *pcm, snd_pcm_hw_params_t *params, unsigned int *val, int *dir), (pcm, params, val, dir), -ENOSYS)
ALSA_FORWARD(int, snd_pcm_hw_params_get_buffer_size,
             (const snd_pcm_hw_params_t *params, snd_pcm_uframes_t *val), (params, val), -ENOSYS)
ALSA_FORWARD(int, snd_device_name_hint, (int card, const char *iface, void ***hints), (card, iface, hints), -ENOSYS)
ALSA_FORWARD(char *, snd_device_name_get_hint, (const void *hint, const char *id), (hint, id), NULL)
ALSA_FORWARD(int, snd_device_name_free_hint, (void **hints), (hints), -ENOSYS)
ALSA_FORWARD(const char *, snd_strerror, (int errnum), (errnum), "ALSA is not installed")
ALSA_FORWARD(int, snd_lib_error_set_handler, (snd_lib_error_handler_t handler), (handler), -ENOSYS)
ALSA_FORWARD(snd_local_error_handler_t, snd_lib_error_set_local, (snd_local_error_handler_t func), (func), NULL)

int speechclient_shim_alsa_has_local_errors(void) { return alsa_symbol("snd_lib_error_set_local") != NULL; }

DL_FORWARD_VOID(alsa_symbol, snd_pcm_hw_params_free, (snd_pcm_hw_params_t *obj), (obj))
