/* An application that handles ALSA's error messages itself keeps them once the library has used
** ALSA: the library set its own process-wide handler, which dropped every message of a thread
** not calling ALSA for it (the application's own). Since 0.11 the library uses ALSA's
** thread-local handler; an application's process-wide one gets the library's messages too.
** Built with -lasound (the library itself loads ALSA with dlopen). */
#define _GNU_SOURCE
#include <alsa/asoundlib.h>
#include <speechclient.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int app_own, app_library;

static void app_handler(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err;
    char text[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (strstr(text, "no_such_pcm_app")) app_own++;
    if (strstr(text, "no_such_pcm_library")) app_library++;
}

int main(void) {
    snd_lib_error_set_handler(app_handler);
    spc_options *o = spc_options_new();
    spc_options_set_server_url(o, "grpc://127.0.0.1:1");
    spc_options_set_app_id(o, "alsa-handler-test");
    spc_options_set_audio_microphone(o, "no_such_pcm_library");
    spc_options_set_prepare_on_init(o, 1);  /* the microphone opens in spc_client_new */
    spc_client *client = NULL;
    spc_error *error = NULL;
    spc_status status = spc_client_new(o, &client, &error);
    spc_options_free(o);
    if (status != SPC_ERROR_AUDIO) {
        printf("test_alsa_handler: FAILED: opening an unknown ALSA device gave status %d, not SPC_ERROR_AUDIO\n", (int)status);
        return 1;
    }
    spc_error_free(error);
    spc_client_free(client);
    /* The application's own ALSA call, on its own thread. */
    snd_pcm_t *pcm = NULL;
    if (snd_pcm_open(&pcm, "no_such_pcm_app", SND_PCM_STREAM_CAPTURE, 0) == 0) snd_pcm_close(pcm);
    if (app_own != 1) {
        printf("test_alsa_handler: FAILED: the application's handler got %d of its own ALSA messages (1 expected)\n", app_own);
        return 1;
    }
    if (app_library < 1) {
        printf("test_alsa_handler: FAILED: the application's process-wide handler did not get the library's ALSA message\n");
        return 1;
    }
    printf("test_alsa_handler: ok (%d of its own, %d of the library's)\n", app_own, app_library);
    return 0;
}
