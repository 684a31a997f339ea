/*
** libspeechclient: a streaming speech-recognition client (C interface)
**
** This header is the whole contract of libspeechclient.so.0. Everything a program may rely on
** is written here; anything not written here is not promised.
**
** OVERVIEW
**
**   spc_options   an opaque bag of settings, filled with setters, copied by spc_client_new().
**   spc_client    one recognition client: an audio source, a connection to a recognition server
**                 (the Speechly SLU protocol over gRPC, or Wyoming: see BACKENDS), and the
**                 callbacks that report what was heard.
**   spc_segment   a snapshot of one segment of speech (words, intent, entities), handed to the
**                 segment callback; valid during the callback, spc_segment_copy() keeps one.
**   spc_error     a failure: a status code, a message naming what was wrong, and the gRPC status
**                 when the server reported one.
**
** A minimal program (error checks shortened; every call returns an spc_status):
**
**     #include <speechclient.h>
**     #include <stdio.h>
**
**     static void on_segment(spc_client *c, const spc_segment *s, void *ud) {
**         (void)c; (void)ud;
**         if (spc_segment_is_final(s)) printf("%s\n", spc_segment_transcript(s));
**     }
**     int main(void) {
**         spc_options *o = spc_options_new();
**         spc_options_set_server_url(o, "grpc://127.0.0.1:50051");
**         spc_options_set_app_id(o, "my-app");
**         spc_options_set_audio_file(o, "speech.wav");
**         spc_options_set_segment_cb(o, on_segment, NULL);
**         spc_client *c = NULL; spc_error *err = NULL;
**         spc_status s = spc_client_new(o, &c, &err);
**         spc_options_free(o);                 // copied by spc_client_new(): free it either way
**         if (s != SPC_OK) {
**             fprintf(stderr, "%s\n", spc_error_message(err)); spc_error_free(err); return 1;
**         }
**         spc_client_start(c);                 // streams the whole file, then stops by itself
**         spc_client_wait_idle(c, 60000);      // returns once the last result was delivered
**         spc_client_free(c);
**         return 0;
**     }
**
** (Tests/e2e/test_memcheck.py compiles this example with -Wall -Wextra -Werror and runs it
** under valgrind.)
**
** CONVENTIONS
**
**   - Every fallible function returns spc_status; SPC_OK is 0. Values are never renumbered or
**     reused. spc_status_str() turns one into static text.
**   - Every destructor (_free) accepts NULL and does nothing with it.
**   - Strings passed in are UTF-8 (paths and device names too) and are copied before the call
**     returns; invalid UTF-8 is refused with SPC_ERROR_INVALID_ARGUMENT (since 0.11; before, it
**     was repaired, and a path in another encoding named a file never given). Strings handed
**     out are owned by the object they came from and live as long as it (for callback
**     arguments: until the callback returns), unless a function says otherwise.
**   - Booleans are int: 0 is false, anything else true.
**   - Passing a NULL handle or pointer where one is required returns
**     SPC_ERROR_INVALID_ARGUMENT; it never crashes. Passing a pointer that was already freed, or
**     that did not come from this library, is undefined behaviour, as in any C library.
**
** THREADS
**
**   - spc_options is not thread-safe: fill it from one thread, then hand it to spc_client_new().
**   - spc_client functions may be called from any thread, concurrently.
**   - The library owns its threads: one callback thread per client (or, with
**     SPC_DELIVERY_SHARED, callback threads that all such clients share), plus worker threads
**     that all clients share (since 0.10; a few, more while a connect, a login or a microphone
**     holds them up), a network thread (with SPC_IO_APPLICATION, the application's thread
**     does some network work, in spc_io_process() or spc_io_dispatch()), and, for each open
**     microphone, a thread that reads it (since 0.11). All callbacks of one
**     client run on that client's callback thread (with SPC_DELIVERY_SHARED, on the shared
**     callback threads; with SPC_DELIVERY_APPLICATION, on the application's thread inside
**     spc_client_dispatch() or spc_io_dispatch()), in the order the events happened, one at a
**     time. A slow callback delays only its own client (and, with SPC_IO_APPLICATION, the
**     network work that its thread does in spc_io_process() or spc_io_dispatch()).
**   - Inside a callback you may call spc_client_start(), spc_client_stop(),
**     spc_client_suspend(), spc_client_resume(), spc_client_push_audio() and the other
**     non-blocking functions. spc_client_free(), spc_client_wait_idle() and
**     spc_client_dispatch() called from inside one of the client's own callbacks return
**     SPC_ERROR_INVALID_STATE instead of deadlocking (or, for dispatch, running a callback
**     inside another).
**   - spc_client_free() returns only after the last callback has returned: no callback of that
**     client runs after it, so user_data may be released right after.
**   - No library lock is held while a callback runs.
**   - When a function that registers a callback fails, that callback will never be called.
*/
#ifndef SPEECHCLIENT_H
#define SPEECHCLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && !defined(SPC_API)
#define SPC_API __attribute__((visibility("default")))
#elif !defined(SPC_API)
#define SPC_API
#endif

/* ---------------------------------------------------------------------------------------------
** VERSION
**
** The macros give the version this header belongs to; spc_version() and spc_version_number()
** give the version of the library actually loaded. SPC_VERSION_NUMBER is
** MAJOR * 1000000 + MINOR * 1000 + PATCH.
*/
#define SPC_VERSION_MAJOR 0
#define SPC_VERSION_MINOR 11
#define SPC_VERSION_PATCH 0
#define SPC_VERSION_STRING "0.11.0"
#define SPC_VERSION_NUMBER 11000

/* The loaded library's version as "MAJOR.MINOR.PATCH". Static text, never NULL. */
SPC_API const char *spc_version(void);

/* The loaded library's version as a number; equals SPC_VERSION_NUMBER of its own header. */
SPC_API int32_t spc_version_number(void);

/* ---------------------------------------------------------------------------------------------
** STATUS CODES
**
** The value of every constant is fixed forever. Errors that happen later, on library threads,
** arrive through the error callback as an spc_error carrying one of these codes.
*/
typedef enum spc_status {
    SPC_OK = 0,
    /* A NULL handle, a NULL or malformed string, a value out of range. The message names it. */
    SPC_ERROR_INVALID_ARGUMENT = 1,
    /* The call is not allowed in the client's current state (start while listening, free from a
    ** callback, push audio to a client whose source is not SPC "push", ...). */
    SPC_ERROR_INVALID_STATE = 2,
    /* Memory could not be allocated. */
    SPC_ERROR_NO_MEMORY = 3,
    /* The server could not be reached or the connection broke: unresolvable host, refused,
    ** reset, unreachable. */
    SPC_ERROR_NETWORK = 4,
    /* The TLS handshake or verification failed: unknown CA, hostname mismatch, expired
    ** certificate, no ALPN h2. */
    SPC_ERROR_TLS = 5,
    /* A connect, request or wait timed out. */
    SPC_ERROR_TIMEOUT = 6,
    /* Login failed or the server rejected the token (gRPC PERMISSION_DENIED or UNAUTHENTICATED
    ** after one fresh login). */
    SPC_ERROR_AUTH = 7,
    /* The server answered with an error status (any other gRPC status than OK); see
    ** spc_error_grpc_status(). */
    SPC_ERROR_API = 8,
    /* The server sent something that is not valid protocol: a malformed message or stream. */
    SPC_ERROR_PARSE = 9,
    /* Audio could not be captured or read: a missing or malformed WAV file, an ALSA device that
    ** cannot be opened or configured. The message names the file or device. */
    SPC_ERROR_AUDIO = 10,
    /* A bug in the library. Please report it with the message. */
    SPC_ERROR_INTERNAL = 11
} spc_status;

/* Static English text for a status ("ok", "invalid argument", ...). Never NULL; an unknown
** value gives "unknown status". */
SPC_API const char *spc_status_str(spc_status status);

/* ---------------------------------------------------------------------------------------------
** ERRORS
**
** An spc_error describes one failure. Constructors return one through an optional out
** parameter (the caller then owns it and frees it with spc_error_free()); the error callback
** receives one that lives until the callback returns.
*/
typedef struct spc_error spc_error;

/* The status code; SPC_ERROR_INVALID_ARGUMENT for a NULL error. */
SPC_API spc_status spc_error_code(const spc_error *error);

/* A message naming what went wrong (for example the file, device or host). Owned by the error;
** never NULL ("" for a NULL error). */
SPC_API const char *spc_error_message(const spc_error *error);

/* The gRPC status code of the failed call (0-16): the one the server reported, or, as in other
** gRPC libraries, the one the client side assigns to a call that failed without a server status
** (4 DEADLINE_EXCEEDED for a call's own deadline, 14 UNAVAILABLE for a lost or refused
** connection, 13 INTERNAL for a malformed response). -1 when the failure did not concern a gRPC
** call (audio, arguments, states), and for a NULL error. */
SPC_API int32_t spc_error_grpc_status(const spc_error *error);

/* A copy the caller owns, to keep an error past its callback; NULL for NULL or when out of
** memory. */
SPC_API spc_error *spc_error_copy(const spc_error *error);

/* Frees an error the caller owns. NULL is a no-op. */
SPC_API void spc_error_free(spc_error *error);

/* ---------------------------------------------------------------------------------------------
** LOG LEVELS
*/
typedef enum spc_log_level {
    SPC_LOG_NONE = 0,
    SPC_LOG_ERROR = 1,
    SPC_LOG_WARNING = 2,
    SPC_LOG_INFO = 3,
    SPC_LOG_DEBUG = 4
} spc_log_level;

/* ---------------------------------------------------------------------------------------------
** CLIENT STATES
**
** IDLE       no audio context; spc_client_start() may be called.
** STARTING   a start was requested; the start callback fires when the server acknowledges it.
** LISTENING  the context is open and audio flows to the server.
** STOPPING   a stop was requested (or the audio source ended); the stop callback fires when the
**            server has sent its last result for the context, and the client returns to IDLE.
** SUSPENDED  spc_client_suspend() closed the microphone and the connections.
*/
typedef enum spc_state {
    SPC_STATE_IDLE = 0,
    SPC_STATE_STARTING = 1,
    SPC_STATE_LISTENING = 2,
    SPC_STATE_STOPPING = 3,
    SPC_STATE_SUSPENDED = 4
} spc_state;

/* ---------------------------------------------------------------------------------------------
** CONNECTION STATES (reported to the state callback, for example to grey out a microphone button)
**
** CONNECTING   opening the connection and logging in.
** READY        the server answered: since 0.8, for a Speechly or Riva server, its HTTP/2 settings
**              arrived (and a login token was accepted by the login server, or is cached from
**              it); for a Wyoming service, its `info` answered `describe`. A server that accepts
**              the connection and never answers, or answers in another protocol (HTTP/1, TLS on
**              a grpc:// URL, anything else), is UNAVAILABLE with a reason naming what answered,
**              within the connect timeout (spc_options_set_timeouts()).
** RECONNECTING the connection was lost during a context (or, while listening, since 0.11, no
**              context could be opened for the speech heard); another attempt follows after a
**              delay.
** UNAVAILABLE  the server cannot be used now (the reason comes with the event); the next start
**              tries again.
** SUSPENDED    spc_client_suspend() closed the connection.
**
** With prepare-on-init the connection is opened inside spc_client_new(); CONNECTING and READY
** are then the client's first events. Otherwise CONNECTING comes with the first start.
*/
typedef enum spc_connection_state {
    SPC_CONNECTION_CONNECTING = 0,
    SPC_CONNECTION_READY = 1,
    SPC_CONNECTION_RECONNECTING = 2,
    SPC_CONNECTION_UNAVAILABLE = 3,
    SPC_CONNECTION_SUSPENDED = 4,
    /* No connection opened yet (the first start opens it without prepare-on-init). Only
    ** spc_client_get_connection_state() gives it, never the state callback. Since 0.8. */
    SPC_CONNECTION_IDLE = 5
} spc_connection_state;

/* ---------------------------------------------------------------------------------------------
** DELIVERY
**
** Where callbacks run. SPC_DELIVERY_THREAD (the default): on the client's own callback thread.
** SPC_DELIVERY_APPLICATION: on the application's thread, inside spc_client_dispatch(); the file
** descriptor from spc_client_event_fd() becomes readable when events are pending, so the client
** fits a poll/epoll loop, GLib or asyncio. The same order and one-at-a-time rules apply.
** SPC_DELIVERY_SHARED (since 0.10): on a few callback threads that every client in this mode
** shares, for a process with many clients (a thousand clients then have two callback threads
** instead of a thousand). A client's callbacks still run in order, one at a time, never two
** at once, but not always on the same thread: keep no per-thread state between them. A slow
** callback delays only its own client: when every shared thread has been inside a callback for
** 20 ms while other clients' events wait, another thread is started (and one that then stays
** idle for 30 s ends). spc_client_free() and spc_client_wait_idle() of one client called from
** another's callback are fine, as in the other modes.
**
** In every mode, while more than 16384 events, or segment updates holding about 8 MiB, wait for
** the application (callbacks that do not return, a loop that does not dispatch), tentative
** segment updates and log lines are not queued, so memory stays bounded: a tentative update
** takes the place of the same segment's update still waiting, so the application gets the
** newest (since 0.9), or is dropped when none waits; later updates of the same segment, its
** final update and every other event still arrive. Final updates are never dropped: when more
** than 32 MiB of them wait (a server flooding finals at an application that takes none), the
** context ends with SPC_ERROR_NO_MEMORY naming the limit, and what waits is still delivered
** (since 0.9). Segment updates are made on the library's threads at the cost of what changed:
** their words and text are put together when first read, once per update delivered.
**
**     int fd = spc_client_event_fd(client);
**     struct pollfd p = { fd, POLLIN, 0 };
**     while (running) {
**         if (poll(&p, 1, -1) > 0) spc_client_dispatch(client, 0, NULL);
**     }
*/
typedef enum spc_delivery {
    SPC_DELIVERY_THREAD = 0,
    SPC_DELIVERY_APPLICATION = 1,
    /* Since 0.10 (older libraries refuse it with SPC_ERROR_INVALID_ARGUMENT). */
    SPC_DELIVERY_SHARED = 2
} spc_delivery;

/* ---------------------------------------------------------------------------------------------
** APPLICATION-DRIVEN NETWORK I/O (since 0.3)
**
** Who reads a client's connection. SPC_IO_LIBRARY (the default): the library's network thread.
** SPC_IO_APPLICATION: the application's thread, inside spc_io_process(), which it calls when
** the one process-wide descriptor from spc_io_fd() is readable. A response then wakes only the
** application's thread, not the network thread first: with SPC_DELIVERY_APPLICATION, one
** wake-up per response instead of two, as with a gRPC completion queue. Worth it for many
** streams in one process; a handful of clients will not notice. Clients with
** SPC_IO_APPLICATION share connections only with each other.
**
** The safety net: until the first spc_io_process() call, while work waits and no call came for
** 250 ms (the application is busy in a long callback, or stopped), and after 5 s without any
** call, the network thread reads those connections itself, until the next call.
** spc_client_wait_idle() and spc_client_free() (and spc_client_new() with prepare-on-init) hand
** them to it at once, for as long as they wait. An application that is late delays responses,
** flow control and keepalive answers by about 250 ms at most; nothing breaks and nothing is
** lost. Audio is sent as it is pushed, whoever reads. Each call tells the library that the
** calling thread serves spc_io_fd(): call it from the thread that polls it, and poll it
** level-triggered (poll(), select(), epoll without EPOLLET): one call may leave work for the next.
**
**     int io = spc_io_fd();            // once per process
**     // in the poll set beside each client's spc_client_event_fd():
**     //   io readable        -> spc_io_process(NULL);
**     //   event fd readable  -> spc_client_dispatch(client, 0, NULL);
**
** When one thread both serves spc_io_fd() and dispatches the clients, spc_io_dispatch() (since
** 0.4) in place of spc_io_process() also runs the callbacks of the responses it read, there and
** then: per response, the event fd is not written, polled and read (three system calls fewer).
** Keep the event fds in the poll set: other events (start, stop, errors, connection states)
** still come through them.
*/
typedef enum spc_io {
    SPC_IO_LIBRARY = 0,
    SPC_IO_APPLICATION = 1
} spc_io;

/* ---------------------------------------------------------------------------------------------
** HANDS-FREE LISTENING (since 0.2)
**
** How contexts open. SPC_ACTIVATION_MANUAL (the default): each spc_client_start() opens one
** context and spc_client_stop() (or the end of a file or of pushed audio) closes it.
**
** SPC_ACTIVATION_VOICE: spc_client_start() begins listening and spc_client_stop() ends it; the
** client is LISTENING in between. The audio goes through a voice activity detector (an adaptive
** detector of the energy above 200 Hz with a learnt noise floor, tuned with
** spc_options_set_vad()). Speech opens a
** context, which also receives the audio of the pre-roll before it so the first word is not
** clipped; after the trailing silence, and once the activation is at least the minimum length,
** the context is stopped; an activation that reaches the maximum length is stopped with a
** SPC_LISTEN_TIMEOUT event (see spc_options_set_endpointing()). Each context has its own start
** and stop callbacks; listening goes on after each. A context that fails (the server is down)
** reports its error and stop, and listening goes on; since 0.11 an activation still going on
** when its context fails carries on in a new context (once: if that one fails too, its error
** says the rest of the activation was not transcribed). Speech heard while no context can be
** opened (the server cannot be reached) waits for one, since 0.11, with its audio kept (up to
** 60 s), and the opening is tried again with the reconnect attempts and delays
** (spc_options_set_reconnect()), each failed try but the last reported as RECONNECTING; when
** they run out, or the server refuses for a reason a retry does not mend, UNAVAILABLE and an
** error naming the speech not transcribed are reported (outside any context: no stop callback
** pairs that error). A spc_client_stop() meanwhile ends listening once that speech had its
** contexts or the attempts ran out (with SPC_RECONNECT_UNLIMITED, not while the server stays
** unreachable; spc_client_suspend() drops it, with an error).
** spc_client_stop() ends the activation in
** progress (its context delivers its last results) and the client then returns to IDLE; the end
** of a file or of pushed audio (spc_client_push_end()) does the same. Audio pushed while
** listening is never dropped for being outside a context: the detector hears all of it.
**
** SPC_ACTIVATION_WAKEWORD: as VOICE, and in each context the segment updates are withheld
** until one of them holds the wakeword phrase (spc_options_set_wakeword(); words compared
** case-insensitively, ignoring punctuation). From that update on, the context's segments are
** delivered (that segment included, wakeword words and all), with SPC_LISTEN_ACTIVATE before the
** first and SPC_LISTEN_DEACTIVATE before the context's stop callback. The phrase must be one
** the server's recognizer can transcribe. With a wake-word service instead
** (spc_options_set_wakeword_url(), since 0.7), the service's detections open the contexts and
** the voice detector only ends them; SPC_LISTEN_DEACTIVATE then comes where the activation
** ends (its endpoint, a stop, a suspend), usually before the context's last results (since
** 0.11; before, with the stop callback).
**
** Listen events (spc_listen_cb) come in order with the other callbacks; position_ms counts the
** audio since spc_client_start():
**   SPC_LISTEN_SPEECH      the detector heard speech begin
**   SPC_LISTEN_SILENCE     the detector heard it end
**   SPC_LISTEN_ACTIVATE    an activation began (VOICE: with the context it opens; WAKEWORD: the
**                          phrase was heard)
**   SPC_LISTEN_DEACTIVATE  the activation ended (its context is being stopped, or, for one
**                          waiting for the previous context, will be stopped once it opens)
**   SPC_LISTEN_TIMEOUT     the activation reached the maximum length; its context is stopped
**                          (DEACTIVATE follows in VOICE mode, and in WAKEWORD mode once the
**                          phrase was heard)
** The detector runs only while listening (VOICE and WAKEWORD): MANUAL mode has no listen events.
**
** The level callback (spc_level_cb), in every mode, reports the level of each chunk of audio
** taken in (in MANUAL mode: each chunk sent in a context) in dBFS (0 for a full-scale square
** wave, -100 for digital silence), for a UI meter. Nothing is computed for it without a callback.
*/
typedef enum spc_activation {
    SPC_ACTIVATION_MANUAL = 0,
    SPC_ACTIVATION_VOICE = 1,
    SPC_ACTIVATION_WAKEWORD = 2
} spc_activation;

typedef enum spc_listen_event {
    SPC_LISTEN_SPEECH = 0,
    SPC_LISTEN_SILENCE = 1,
    SPC_LISTEN_ACTIVATE = 2,
    SPC_LISTEN_DEACTIVATE = 3,
    SPC_LISTEN_TIMEOUT = 4
} spc_listen_event;

/* Tunables of the voice activity detector (spc_options_set_vad()). The detector looks at 20 ms
** frames of the audio above 200 Hz (a high-pass in front of it, since 0.4.1: rumble, traffic
** and mains hum carry their power below the voice). A frame is loud when that energy is SNR_DB
** above the learnt noise floor and above NOISE_GATE_DB; it can be below the level that
** spc_options_set_level_cb() reports, which is not filtered. Speech begins when at least ACTIVATION_RATIO of the last WINDOW_FRAMES frames
** are loud, and ends when at most RELEASE_RATIO are for HOLD_MS (the SILENCE event then gives
** the position where the quiet began). The floor follows quiet audio with the half-time, and
** rises to the quietest frame of each 1.5 s, so a steady new noise stops counting as speech. */
typedef enum spc_vad_param {
    SPC_VAD_SNR_DB = 0,                  /* default 4, 0..60 */
    SPC_VAD_NOISE_GATE_DB = 1,           /* default -50 dBFS, -100..0 */
    SPC_VAD_NOISE_LEARN_HALFTIME_MS = 2, /* default 400, 20..60000 */
    SPC_VAD_WINDOW_FRAMES = 3,           /* default 5, 1..100 */
    SPC_VAD_ACTIVATION_RATIO = 4,        /* default 0.6, 0.01..1 */
    SPC_VAD_RELEASE_RATIO = 5,           /* default 0.2, 0..1, below the activation ratio */
    SPC_VAD_HOLD_MS = 6                  /* default 300, 0..10000 */
} spc_vad_param;

/* ---------------------------------------------------------------------------------------------
** OBJECTS
*/
typedef struct spc_options spc_options;
typedef struct spc_client spc_client;
typedef struct spc_segment spc_segment;
typedef struct spc_devices spc_devices; /* the capture devices (spc_audio_devices(), since 0.8) */

/* ---------------------------------------------------------------------------------------------
** CALLBACKS
**
** Every callback receives the client it belongs to and the user_data given with it. Pointers
** passed to a callback are valid until it returns.
*/

/* A segment changed: new tentative words, final words, an intent or entities. The snapshot holds
** the whole segment as known now. A segment's last update has spc_segment_is_final() true. */
typedef void (*spc_segment_cb)(spc_client *client, const spc_segment *segment, void *user_data);

/* Something failed after the call that caused it had returned (connection, server, audio). */
typedef void (*spc_error_cb)(spc_client *client, const spc_error *error, void *user_data);

/* The server opened the audio context requested by spc_client_start(). */
typedef void (*spc_start_cb)(spc_client *client, const char *context_id, void *user_data);

/* The audio context is closed: the server sent its last result for it, or it ended because of
** an error (then context_id may be "" if the server never opened it). */
typedef void (*spc_stop_cb)(spc_client *client, const char *context_id, void *user_data);

/* A log line from the library, at or below the options' log level. Lines never contain tokens
** or authorization values. */
typedef void (*spc_log_cb)(spc_client *client, spc_log_level level, const char *message,
                           void *user_data);

/* The connection state changed (see CONNECTION STATES). For RECONNECTING, attempt is the
** attempt about to be made (from 1) and delay_ms the wait before it; otherwise both are 0. For
** UNAVAILABLE, reason says why (valid during the callback); otherwise it is NULL. */
typedef void (*spc_state_cb)(spc_client *client, spc_connection_state state, int32_t attempt,
                             int32_t delay_ms, const spc_error *reason, void *user_data);

/* The hands-free pipeline reported an event (see HANDS-FREE LISTENING). Since 0.2. */
typedef void (*spc_listen_cb)(spc_client *client, spc_listen_event event, int64_t position_ms,
                              void *user_data);

/* The level of a chunk of audio in dBFS, at position_ms of audio since the start. Since 0.2. */
typedef void (*spc_level_cb)(spc_client *client, float level_dbfs, int64_t position_ms,
                             void *user_data);

/* The client became idle: the work that spc_client_start() or spc_client_suspend() began has
** ended, the client is IDLE or SUSPENDED with no start queued, and the callbacks of every event
** before this one have returned. Once per such stretch of work: after its last stop callback
** (hands-free, after the listening ends, also when no context opened), or after a suspend took
** effect. While it runs, the client counts as idle: spc_client_wait_idle() in another thread
** returns SPC_OK (unless the callback starts the client again). An application that waits for
** the end of its work (an event loop watching spc_client_event_fd(), a thread waiting on its
** own condition variable) learns it from this event instead of polling
** spc_client_wait_idle(client, 0). Since 0.11. */
typedef void (*spc_idle_cb)(spc_client *client, void *user_data);

/* ---------------------------------------------------------------------------------------------
** OPTIONS
**
** Create, fill, pass to spc_client_new(), free. Setters copy their arguments. A setter that
** rejects its argument returns SPC_ERROR_INVALID_ARGUMENT and leaves the option unchanged.
** Defaults are given with each setter.
*/

/* A new options object with every default; NULL when out of memory. Free with
** spc_options_free(). */
SPC_API spc_options *spc_options_new(void);

/* Frees options. NULL is a no-op. Clients made from them keep their own copy. */
SPC_API void spc_options_free(spc_options *options);

/* Why the last setter call on these options failed: "" after one that succeeded (or for NULL),
** else text naming the setter, the value and the rule, for example
** "spc_options_set_app_id: app id '...' must be 1-256 characters without spaces or control
** characters". Owned by the options, valid until the next setter call or spc_options_free().
** spc_client_new() also names every setter that failed and was not called again successfully,
** when it reports an invalid or missing argument. Callback setters never fail. Since 0.5. */
SPC_API const char *spc_options_last_error(const spc_options *options);

/* The server, whose scheme names the protocol (the backend):
**
**   "grpc+tls://host[:port]"     Speechly SLU over gRPC with TLS, default port 443; "grpcs://"
**                                and "https://" are synonyms
**   "grpc://host[:port]"         the same over plaintext HTTP/2, default port 80; "http://" is a
**                                synonym
**   "wyoming://host[:port]"      Wyoming speech recognition over TCP (wyoming-faster-whisper,
**                                wyoming-vosk, ...), default port 10300; Wyoming has no TLS
**   "wyoming+unix:///path"       the same over a Unix socket (an absolute path, at most 107
**                                bytes)
**   "riva://host[:port]"         NVIDIA Riva speech recognition over plaintext gRPC, default port
**                                50051; "rivas://host[:port]" over TLS, default port 443 (since 0.6)
**
** IPv6 hosts in brackets ("grpc://[::1]:50051"). No path, user or query (one trailing "/" is
** ignored). Required before spc_client_new().
**
** TLS is the system's OpenSSL 3 (libssl.so.3), opened when the first TLS connection is made, not
** linked (from 0.11): a program that reaches its servers in plaintext never loads it. Where it
** cannot be opened, a TLS connection fails at once with SPC_ERROR_TLS naming the package to
** install (the process's first attempt decides: one installed later is used from the next start).
**
** BACKENDS. The callbacks are the same for every backend; what a protocol lacks is not made up:
**
**                      Speechly (grpc://)    Wyoming (wyoming://)          Riva (riva://)
**   login, app id      yes (required)        none (app id not needed)      none (app id not needed)
**   ready means        connected; the login  the server answered           the server answered
**                      runs before the first "describe" with "info"        GetRivaSpeechRecognition-
**                      context               listing speech recognition    Config (once per client)
**                                            in the options' language
**   tentative updates  yes                   only from a server that       yes (interim results;
**                                            streams (transcript-chunk);   their words have no times)
**                                            else one final per segment
**   word times         yes                   no: -1                        final words: yes
**   intents, entities  yes                   no (intent "", no entities)   no
**   segments           where the server      one per stream: a long        one per final result
**                      ends them (pauses)    context gets one at each
**                                            stream rotation (see
**                                            spc_options_set_stream_budget())
**   reconnect, replay  yes                   yes (a new connection, the    yes (a new call, the
**                                            unfinished audio again)       unfinished audio again)
**
** The language (spc_options_set_language()) is checked against a Wyoming server's models: the
** tag itself, else its primary subtag ("en-US" asks for "en"); a server that lists none of them
** fails with SPC_ERROR_INVALID_ARGUMENT naming what it lists. */
SPC_API spc_status spc_options_set_server_url(spc_options *options, const char *url);

/* A separate server for login, same syntax; NULL (the default) means the server URL. */
SPC_API spc_status spc_options_set_identity_url(spc_options *options, const char *url);

/* The application id. Required for a Speechly server (spc_client_new() fails without it);
** ignored by Wyoming and Riva, which have no login. Without a project id the
** login has application scope; with one, the login has project scope and the app id is sent with
** each start (a project-scoped token must name the app). NULL clears it. */
SPC_API spc_status spc_options_set_app_id(spc_options *options, const char *app_id);

/* The project id: log in with project scope (the app id is still required). NULL clears it. */
SPC_API spc_status spc_options_set_project_id(spc_options *options, const char *project_id);

/* The BCP-47 language of the speech. Default "en-US". A Riva server whose listed models all name
** their language, none with this one's primary language, fails before READY with
** SPC_ERROR_INVALID_ARGUMENT naming what it offers (since 0.11). */
SPC_API spc_status spc_options_set_language(spc_options *options, const char *language);

/* The recognizer model to ask for, by name: for Wyoming, the model named in its "transcribe"
** event, checked against the models the server's info lists (an unknown name fails with
** SPC_ERROR_INVALID_ARGUMENT naming them); for Riva, RecognitionConfig.model, checked against
** the models GetRivaSpeechRecognitionConfig lists (one not listed fails before READY with
** SPC_ERROR_INVALID_ARGUMENT naming them, since 0.11; before, and with a server that lists none,
** the server's INVALID_ARGUMENT at the context's start); ignored by Speechly. 1-256 characters without spaces
** or control characters. NULL (the default): the server's default model. Since 0.6. */
SPC_API spc_status spc_options_set_model(spc_options *options, const char *model);

/* This device's id: a UUID ("xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", hex digits, stored in lower
** case). Default: one generated once and kept in the token-cache directory, so it stays the
** same across runs. NULL restores the default. */
SPC_API spc_status spc_options_set_device_id(spc_options *options, const char *device_id);

/* The directory for cached login tokens and the generated device id (created 0700 when
** missing). Default: $XDG_CACHE_HOME/speechclient, else $HOME/.cache/speechclient; with neither
** set, nothing is cached. NULL restores the default. */
SPC_API spc_status spc_options_set_cache_dir(spc_options *options, const char *path);

/* A PEM file of CA certificates to trust instead of the system store, for grpc+tls servers.
** NULL restores the system store: OpenSSL's CA file and hashed directory (or SSL_CERT_FILE and
** SSL_CERT_DIR when set). The directory is searched first; the file is read, once per process,
** only when the directory has no issuer for a certificate being verified. A server's host name
** must be in its certificate's subjectAltName: since 0.11 a certificate naming it only in its
** subject's CN is refused ("hostname mismatch"), as RFC 6125 and browsers do. */
SPC_API spc_status spc_options_set_ca_file(spc_options *options, const char *path);

/* Non-zero turns certificate and hostname verification OFF (development only; logged as a
** warning when the client is created). Default 0. */
SPC_API spc_status spc_options_set_insecure_tls(spc_options *options, int insecure);

/* Audio from an ALSA capture device, by name; NULL means "default". This is the default
** source. The device's own rate and channel count are negotiated and converted, and its sample
** format: S16_LE, else S32_LE, FLOAT_LE, S24_3LE or S24_LE (since 0.11; before, a device
** without S16_LE, as I2S microphones often are, failed to open). The names to
** give are listed by spc_audio_devices(). A context's audio begins when the library takes
** its start, a moment after spc_client_start(): with the device open already (prepare-on-init,
** or an earlier context), up to about 100 ms heard before the call may be in it; a device
** opened by the start gives audio once open (some take a few hundred ms). Nothing is kept
** between contexts, except for a start queued behind a pending stop (spc_client_start()), or
** made after spc_client_resume() while the suspended context still finishes (since 0.11). A
** context's audio ends at spc_client_stop(), and a start queued behind it begins at its call,
** however long the library takes to get to them, once the device is open and the context's
** audio is being kept (manual activation; since 0.11: a library thread held in a connect gave
** the first context the next one's first words). A
** device that failed while no context used it (unplugged) is opened again by the next start.
** Audio the device loses while a context keeps it (an overrun: the device not read in time; a
** machine suspended) is said by the error callback (SPC_ERROR_AUDIO, naming how much; the
** context goes on; the callback may come after that context's stop), and silence stands in for
** up to 5 s of it, so that later word times stay true. Audio dropped because the library was
** held up for over 30 s is said the same way, without silence (later word times are early by
** it). Both since 0.11 (before, in the log alone). ALSA's own messages about the device go to
** the log callback, not to stderr, through ALSA's thread-local handler (since 0.11: before, the
** library replaced the process-wide handler, and an application's own ALSA messages were
** dropped); an application that sets a process-wide handler (snd_lib_error_set_handler())
** receives the library's ALSA messages there instead. */
SPC_API spc_status spc_options_set_audio_microphone(spc_options *options, const char *device);

/* The ALSA capture devices, as `arecord -L` lists them: each name can be given to
** spc_options_set_audio_microphone(), each description is ALSA's (lines separated by '\n': the
** card, then what the device does). Devices that only play are left out; at most 1024. Stores
** a list the caller frees with spc_devices_free() in *out_devices (NULL on failure).
** SPC_ERROR_INVALID_ARGUMENT for NULL; SPC_ERROR_AUDIO when ALSA cannot list them. The count is
** 0 for NULL; a name or description is NULL for an index out of range; freeing NULL does
** nothing. Since 0.8. */
SPC_API spc_status spc_audio_devices(spc_devices **out_devices);
SPC_API size_t spc_devices_count(const spc_devices *devices);
SPC_API const char *spc_devices_name(const spc_devices *devices, size_t i);
SPC_API const char *spc_devices_description(const spc_devices *devices, size_t i);
SPC_API void spc_devices_free(spc_devices *devices);

/* Audio from a WAV file (RIFF or RF64): PCM 16, 24 or 32 bit, or 32-bit float; 1000-384000 Hz,
** 1-32 channels (averaged). Each spc_client_start() streams the whole file from its beginning,
** as fast as the server takes it, then stops the context by itself. The file is checked when
** the client is created (SPC_ERROR_AUDIO naming the file and the problem). The data chunk is
** read to the end of the file when its size is a streaming writer's placeholder (0, 0xFFFFFFFF,
** or, since 0.11, 0x7FFF0000 and over, as arecord and sox write to a pipe, with audio and no
** chunk after it) or wrapped at 4 GiB; a file cut short of its declared size is read as far as
** it goes, with a warning in the log. */
SPC_API spc_status spc_options_set_audio_file(spc_options *options, const char *path);

/* Audio pushed by the application with spc_client_push_audio(): interleaved signed 16-bit
** frames at sample_rate (8000-192000 Hz) with channels (1-8) channels. */
SPC_API spc_status spc_options_set_audio_push(spc_options *options, uint32_t sample_rate,
                                              uint32_t channels);

/* Audio read from a file descriptor the application opened: a pipe, standard input (fd 0), a
** socket or a file. sample_rate 0: the stream starts with a WAV header, read as it arrives (the
** formats spc_options_set_audio_file() reads; the size 0, 0xFFFFFFFF or over 0x7FFF0000 that
** writers to a pipe put there means "to the end of the stream"; a stream that ends before its
** declared size is read as far as it goes, with a warning in the log since 0.11); channels must
** then be 0.
** Otherwise raw interleaved signed 16-bit little-endian frames, no header, at sample_rate
** (8000-192000 Hz) with channels (1-8).
**
** The descriptor stays the application's: the library never closes it nor changes its flags,
** and never touches it once spc_client_free() has returned; keep it open until then. It is read
** only while a context runs, as fast as the server takes the audio, as a file is (a writer is
** held back by the pipe, nothing is dropped): each spc_client_start() reads on from where the
** previous context stopped, so a stop leaves the rest for the next start. At the end of the
** stream the context stops by itself; a later start fails with SPC_ERROR_AUDIO. While no data
** arrives the client waits for it (a stop or spc_client_free() takes effect within 100 ms).
**
** spc_client_new() checks that the descriptor is open for reading (SPC_ERROR_AUDIO otherwise)
** without reading it; a bad WAV header or a read error ends the context with SPC_ERROR_AUDIO
** through the error callback. SPC_ERROR_INVALID_ARGUMENT for a negative fd or a rate or channel
** count out of range. Since 0.9. */
SPC_API spc_status spc_options_set_audio_fd(spc_options *options, int fd, uint32_t sample_rate,
                                            uint32_t channels);

/* The duration of each audio message sent to the server, 20-1000 ms. Default 100. */
SPC_API spc_status spc_options_set_chunk_ms(spc_options *options, uint32_t chunk_ms);

/* Non-zero: spc_client_new() connects, logs in and opens the microphone, and fails with the
** error that stopped it (network, auth, audio, ...). Zero (the default): that happens on the first
** spc_client_start(), and failures arrive through the error callback. */
SPC_API spc_status spc_options_set_prepare_on_init(spc_options *options, int prepare);

/* Adds value to the values of key in the options sent with every audio context (for example
** "timezone" or "vocabulary"). */
SPC_API spc_status spc_options_add_context_option(spc_options *options, const char *key,
                                                  const char *value);

/* Removes every context option. */
SPC_API spc_status spc_options_clear_context_options(spc_options *options);

/* Adds a request header (gRPC metadata) sent with every call to a Speechly server (login and
** streams) or a Riva server, for example the "authorization" and "function-id" of NVIDIA's
** hosted Riva endpoints; ignored by Wyoming. The name is lowered; letters, digits, '-', '_' and
** '.' only; HTTP/2's and gRPC's own ("content-type", "te", "user-agent", "grpc-*", ...) are
** refused, and so is "authorization" on a Speechly server (spc_client_new() fails: the login
** token goes there). The value is printable ASCII. At most 32 headers and 16 KiB of them. The
** same name added twice is sent twice. Since 0.6. */
SPC_API spc_status spc_options_add_header(spc_options *options, const char *name, const char *value);

/* Removes every header added with spc_options_add_header(). Since 0.6. */
SPC_API spc_status spc_options_clear_headers(spc_options *options);

/* Reconnection when the connection is lost during a context (network error, GOAWAY,
** UNAVAILABLE, keepalive timeout, a stream reset or refused, a stream a proxy ended without a gRPC
** status, HTTP 502/503/504 from a proxy): up to max_attempts (0-100, or SPC_RECONNECT_UNLIMITED
** since 0.5 for a device that must ride out any outage; 0 turns reconnection off) without
** progress (a final segment, or a stream that took audio for 5 s before it was lost; since 0.11
** not one lost after its stop, where the server's answer is the progress, nor one lost to a
** timeout: a server failing the same audio each time runs out of attempts), waiting initial_delay_ms (1-60000) doubled on each attempt up to max_delay_ms
** (initial_delay_ms-600000), with +-25 % jitter. The new connection gets a new server context and
** the audio the server had not finished with is sent again; the application sees one context:
** no extra start or stop, segment ids and word times continue, no word is delivered twice.
** When the attempts run out, one error says how many seconds of audio, from when, were lost;
** while streams of the context before that audio still finish (their stop sent), the error
** waits for their last words, at most their finish timeout (since 0.11). A Riva call the server
** ends with status OK while the client's audio is still queued (audio it never read) counts as a
** loss too (since 0.11). While listening (VOICE, WAKEWORD), the same attempts and delays retry
** opening a context for speech heard while the server cannot be reached (since 0.11; see
** HANDS-FREE LISTENING). Defaults 6, 200, 5000. */
SPC_API spc_status spc_options_set_reconnect(spc_options *options, uint32_t max_attempts,
                                             uint32_t initial_delay_ms, uint32_t max_delay_ms);
#define SPC_RECONNECT_UNLIMITED UINT32_MAX

/* How much audio of the current context is kept for replay after a reconnection, 1000-600000
** ms. A WAV file is never sent further ahead of the server's final results than this (since
** 0.5), so a connection lost at any moment loses none of it; a microphone or pushed audio cannot
** wait, and audio older than that and not yet final is reported lost by an error (a stream
** whose server went silent is given up while its audio fills half of this: spc_client_stop()).
** Default 30000. */
SPC_API spc_status spc_options_set_replay_buffer_ms(spc_options *options, uint32_t ms);

/* A context longer than this continues in a new server context at the next pause, so that
** hour-long audio is transcribed although a server context lasts at most 5 minutes; the
** application sees one context. 1000-3600000 ms. Default 270000. From 0.5 on, each server context
** has its own HTTP/2 stream (below), so this is also the longest a stream lasts, plus at most
** 20 s to find a pause: under the 5-minute stream limits that proxies and load balancers set.
** A server that ends its context first (its own limit, when this is raised past it: `finished`
** with an error, or before the stream's stop) has the audio after its last final segment carried
** on a new stream, as after a lost connection (since 0.11; before, the application's context
** ended there with an error and the rest of the audio was never sent). */
SPC_API spc_status spc_options_set_context_limit_ms(spc_options *options, uint32_t ms);

/* BOUNDED STREAMS (since 0.5). Every context has its own HTTP/2 stream, ended cleanly (END_STREAM,
** then the server's status) once its results are in; the connection is shared and stays open.
** Proxies cap what one stream may carry: nginx resets a request body over client_max_body_size
** (1 MB by default, the gRPC framing counted), others cap a stream's duration. So a stream
** carries at most max_bytes of requests: from half of it the context moves to a new stream at
** the next pause in the audio (200 ms of quiet, against the room's own noise as well as in
** absolute terms; from three quarters of it 100 ms, from nine tenths 40 ms, the gap between two
** words; since 0.11), at max_bytes at once (at a markedly quieter 20 ms of the chunk that would
** pass it, if the part that fits has one). The cut falls inside the pause, in whichever chunk it
** is. The old stream finishes
** its words while the new one goes on; the application sees one context, its segments in order,
** no word lost or repeated at the seam. 65536-1073741824 bytes. Default 900000 (about 28 s of
** 16 kHz audio: under nginx's default with room to spare). Since 0.5. */
SPC_API spc_status spc_options_set_stream_budget(spc_options *options, uint32_t max_bytes);

/* After a server or proxy worker sends GOAWAY (it is shutting down or reloading), new contexts go
** to a new connection at once, and a running context moves to a new stream on a new connection at
** its next pause, at the latest after ms (100-600000). Default 10000. Since 0.5. */
SPC_API spc_status spc_options_set_drain_timeout_ms(spc_options *options, uint32_t ms);

/* HTTP/2 keepalive: a PING when nothing was received for interval_ms (1000-3600000; 0 turns
** keepalive off) while streams are open; no answer within timeout_ms (100-600000) and the
** connection is considered dead (a network error: the context reconnects). A server that answers
** with GOAWAY ENHANCE_YOUR_CALM ("too many pings") doubles the interval for its next
** connections, as gRPC's clients do. Defaults 30000 and 10000 (gRPC's guidance: not more often
** than the server allows; grpcio servers allow one every 5 minutes without streams, any with).
** Connections are shared only by clients with the same settings. Since 0.5. */
SPC_API spc_status spc_options_set_keepalive(spc_options *options, uint32_t interval_ms,
                                             uint32_t timeout_ms);

/* Backpressure for pushed audio: spc_client_push_audio() waits up to ms (0-3600000) while the
** audio of the context not yet final (sent and not finished by the server, or held during a
** reconnection) plus these frames would outgrow the replay buffer, so that a stream lost at any
** moment loses nothing (as a WAV file never gets further ahead). When the frames do not fit in
** time it returns SPC_ERROR_TIMEOUT and takes none of them: push them again. A push longer than
** a quarter of the buffer (a whole recording in one call) is taken in slices of that length, each
** waiting for room: only the first slice's wait can fail it; once part is taken, a slice that
** finds no room in time is taken anyway (since 0.11; before, such a push never fit, and timed out
** on every retry); such a push can take that many waits, and pushes from two threads at once may
** interleave at its slices. Called from one of
** the client's own callbacks it never waits. When the library's worker is held up for longer (a
** connect, a login) the room cannot be known: after the wait the frames are taken (since 0.11;
** audio that then outgrows the buffer is reported lost). 0 (the default): never wait; audio
** beyond the buffer is reported lost by an error, as for a microphone. Pushing faster than real
** time (a recording) wants this. Since 0.5. */
SPC_API spc_status spc_options_set_push_wait_ms(spc_options *options, uint32_t ms);

/* Timeouts, each 100-600000 ms:
**   connect_ms  a connection must answer within this: TCP, TLS, and the server's first HTTP/2
**               SETTINGS (a Wyoming service: its `info`); otherwise SPC_ERROR_TIMEOUT, gRPC status
**               14 UNAVAILABLE, naming the server. A refused connection fails at once.
**   login_ms    the deadline of a login to a Speechly server (SPC_ERROR_TIMEOUT, status 4).
**   start_ms    a server must acknowledge a context's start within this on each stream it opens
**               (the start callback comes with the first); otherwise that stream counts as lost
**               and is retried like a lost connection (spc_options_set_reconnect()), its audio
**               replayed; when the attempts run out, the context ends with SPC_ERROR_TIMEOUT.
**               (since 0.11) also how long a stopped stream's server may stay silent while live
**               audio not yet final ages in the replay buffer (see spc_client_stop()), and how
**               long a stream still taking that audio may go without a result, once that audio
**               fills half the replay buffer, before it is stopped to see (a server that answered
**               as it heard; a buffer of at least twice start_ms): a low start_ms gives a slow
**               server less time to answer a stop, and a quiet one more stream moves.
** Defaults 5000, 10000 and 10000. Since 0.8. */
SPC_API spc_status spc_options_set_timeouts(spc_options *options, uint32_t connect_ms,
                                            uint32_t login_ms, uint32_t start_ms);

/* The most detailed level passed to the log callback. Default SPC_LOG_WARNING. */
SPC_API spc_status spc_options_set_log_level(spc_options *options, spc_log_level level);

/* Callback setters: cb may be NULL to remove one. */
SPC_API spc_status spc_options_set_segment_cb(spc_options *options, spc_segment_cb cb,
                                              void *user_data);
SPC_API spc_status spc_options_set_error_cb(spc_options *options, spc_error_cb cb,
                                            void *user_data);
SPC_API spc_status spc_options_set_start_cb(spc_options *options, spc_start_cb cb,
                                            void *user_data);
SPC_API spc_status spc_options_set_stop_cb(spc_options *options, spc_stop_cb cb,
                                           void *user_data);
SPC_API spc_status spc_options_set_log_cb(spc_options *options, spc_log_cb cb, void *user_data);
SPC_API spc_status spc_options_set_state_cb(spc_options *options, spc_state_cb cb,
                                            void *user_data);

/* Where callbacks run (see DELIVERY). Default SPC_DELIVERY_THREAD. SPC_DELIVERY_SHARED since 0.10;
** an unknown value is SPC_ERROR_INVALID_ARGUMENT. */
SPC_API spc_status spc_options_set_delivery(spc_options *options, spc_delivery delivery);

/* Who reads the client's connection (see APPLICATION-DRIVEN NETWORK I/O). Default
** SPC_IO_LIBRARY. Since 0.3. */
SPC_API spc_status spc_options_set_io(spc_options *options, spc_io io);

/* How contexts open (see HANDS-FREE LISTENING). Default SPC_ACTIVATION_MANUAL. With
** SPC_ACTIVATION_WAKEWORD, spc_client_new() fails with SPC_ERROR_INVALID_ARGUMENT unless a
** wakeword is set. Since 0.2. */
SPC_API spc_status spc_options_set_activation(spc_options *options, spc_activation mode);

/* The wakeword phrase: 1 to 8 words, at most 256 bytes; NULL clears it. Since 0.2. */
SPC_API spc_status spc_options_set_wakeword(spc_options *options, const char *phrase);

/* A wake-word service decides when SPC_ACTIVATION_WAKEWORD opens a context, instead of the
** phrase in the transcript: url is a Wyoming wake service (wyoming://HOST:PORT or
** wyoming+unix:///PATH: wyoming-openwakeword, wyoming-porcupine, ...), name the wake word's
** model name or a prefix of it ("hey_jarvis" for openWakeWord's "hey_jarvis_v0.1"; 1-128
** letters, digits, '_', '-', '.'), or NULL for any wake word the service detects. NULL url
** clears both.
**
** While listening, all the audio goes to the service (connected at spc_client_start(), within
** the connect timeout; a service that is unreachable or has no such wake word fails the start
** with an error naming what it lists). On a detection, SPC_LISTEN_ACTIVATE (position_ms: where
** the service heard it; 500 ms before it arrived for a service that does not say) and a context opens on the recognizer with the audio from the pre-roll
** before that point on, so nothing said right after the wake word is cut; it ends by the
** endpointing (trailing silence, counted from when the detection arrived at the earliest,
** maximum length)
** with SPC_LISTEN_DEACTIVATE, and every segment of it is delivered. A burst of detections for
** one wake word opens one context; a detection while the previous context still finishes (its
** activation ended, the recognizer not done) opens an activation that waits for it, as speech
** does in voice mode, and gets its own context (since 0.11; before, it was ignored, and the
** command after it lost). Audio with no wake word opens no context. A file is read
** at real time while listening (a wake service locates the wake word only in audio arriving
** about as fast as it is spoken). Losing the service reports an error and listening goes on:
** it is reconnected every 2 s, and the wake word is not heard meanwhile. Since 0.7. */
SPC_API spc_status spc_options_set_wakeword_url(spc_options *options, const char *url, const char *name);

/* Sets one tunable of the voice activity detector (see spc_vad_param for defaults and ranges).
** A value out of range, a fraction for NOISE_LEARN_HALFTIME_MS, WINDOW_FRAMES or HOLD_MS, or a
** release ratio not below the activation ratio, is rejected. Since 0.2. */
SPC_API spc_status spc_options_set_vad(spc_options *options, spc_vad_param param, double value);

/* Endpointing while listening: pre_roll_ms of audio before the detector fired is sent first
** (default 300, 0..5000); an activation ends after trailing_silence_ms without speech (default
** 1000, 100..60000) once it is min_activation_ms long (default 500, 0..60000), and at
** max_activation_ms at the latest (default 15000, max(min, 500)..3600000). Lengths count the
** audio the context receives, pre-roll included. Since 0.2. */
SPC_API spc_status spc_options_set_endpointing(spc_options *options, uint32_t pre_roll_ms,
                                               uint32_t trailing_silence_ms,
                                               uint32_t min_activation_ms,
                                               uint32_t max_activation_ms);

/* Listen events and audio levels (see HANDS-FREE LISTENING). Since 0.2. */
SPC_API spc_status spc_options_set_listen_cb(spc_options *options, spc_listen_cb cb,
                                             void *user_data);
SPC_API spc_status spc_options_set_level_cb(spc_options *options, spc_level_cb cb,
                                            void *user_data);

/* The idle callback (see spc_idle_cb). Default none: then no idle event is queued. Since 0.11. */
SPC_API spc_status spc_options_set_idle_cb(spc_options *options, spc_idle_cb cb, void *user_data);

/* Inside a listen callback for SPC_LISTEN_ACTIVATE: what was heard. With a wake-word service,
** the name of the wake word it detected, as the service reports it (for example
** "hey_jarvis_v0.1"); with the transcript wakeword, the phrase. NULL for other events, other
** activations (SPC_ACTIVATION_VOICE), a NULL client, and outside a listen callback. Owned by
** the library and valid until the callback returns; call it only from inside the callback.
** Since 0.8. */
SPC_API const char *spc_listen_name(spc_client *client);

/* ---------------------------------------------------------------------------------------------
** CLIENT
*/

/* Creates a client from a copy of options and stores it in *out_client (set to NULL on
** failure). On failure, when out_error is not NULL, *out_error receives an error the caller
** frees with spc_error_free(); otherwise it is set to NULL.
**
** Returns SPC_ERROR_INVALID_ARGUMENT for NULL options or out_client, a missing server URL or
** (for a Speechly server) app id; SPC_ERROR_AUDIO for an unreadable WAV file; with prepare-on-init, also the
** network, TLS, timeout, auth and audio errors of preparing. */
SPC_API spc_status spc_client_new(const spc_options *options, spc_client **out_client,
                                  spc_error **out_error);

/* Stops everything and frees the client: any open context is abandoned (its stop callback is
** not called), a connect or login in progress is abandoned (free does not wait for its
** timeout), the audio source and connections are closed, callbacks already queued are
** delivered, the client's work on the library's shared threads ends and its callback thread is
** joined. A context freed while open whose segments had words delivers them once more, final,
** before free returns (words the server never confirmed have spc_segment_word_is_final() 0), so
** nothing heard is dropped without a trace. No callback of this client runs after it returns.
** NULL returns SPC_OK. From inside one of the client's own callbacks it returns
** SPC_ERROR_INVALID_STATE and frees nothing. */
SPC_API spc_status spc_client_free(spc_client *client);

/* Requests a new audio context. Returns at once; the start callback fires when the server has
** opened the context (or the error callback, then the stop callback, when it could not be).
** In IDLE: starts. In STOPPING: the start is queued and happens after the pending stop
** completes; the audio pushed, or heard by an open microphone, from this call on is for its
** context, held until it opens (since 0.11; before, it was dropped until then). Otherwise (STARTING, LISTENING, or a start already queued, SUSPENDED):
** SPC_ERROR_INVALID_STATE. With VOICE or WAKEWORD activation it begins listening instead: the
** client is LISTENING once the audio source and connection are open (or, when they cannot be,
** the error callback and then the stop callback with context id "" fire), and the detector opens
** contexts (see HANDS-FREE LISTENING). */
SPC_API spc_status spc_client_start(spc_client *client);

/* Requests the end of the current context. Returns at once; the stop callback fires when the
** server has sent its last result. A stream the server has not finished 60 s after its stop
** counts as lost (since 0.11). The 60 s count from the stop, or from the end (finished or
** lost) of the stream before it in the context (rotation, reconnection), whichever is later,
** and afresh from each final the server sends on it that reaches a second further into its
** audio, up to ten times the stream's audio after the count began: a server slower than real
** time, still working through the audio, is waited for (Wyoming's one transcript per stream
** restarts nothing). A lost stream's audio is replayed on a new stream, and when the reconnection
** attempts run out the error callback (SPC_ERROR_TIMEOUT) and the stop callback fire; before,
** such a server left the client STOPPING. From 0.11 a stream of a context that still takes
** live audio (a microphone, pushed audio, hands-free listening; not a WAV file or a descriptor,
** which wait for the server) is given up sooner when its server answered as it heard (tentative
** or interim results before the stream's stop) and then went silent: the first stream not
** finished in audio order, its stop sent, is lost when its server has sent nothing on it for the
** start timeout (spc_options_set_timeouts()) since its stop, its last result or the end of the
** stream before it, whichever is later, while the context's audio from where that stream's
** final words end (or from its start) fills half the replay buffer (spc_options_set_replay_buffer_ms()). A replica that
** hung behind a proxy (which answers the PINGs and takes the audio) was waited for the 60 s,
** and by then the replay buffer had dropped the audio it never answered; now that audio is
** replayed on a new connection, as far as the buffer still holds it. A server that answered as
** it heard (on any stream of the client) and goes silent while a stream still takes that audio
** (nothing on it, results or round-trip requests, for the start timeout since its last result or
** its start, and the audio since its last final words filling half the replay buffer, of at
** least twice the start timeout) has the stream moved to a new one at its next pause, or cut
** within a second (an eighth of a buffer under 8 s), inside a word if none comes; a result
** meanwhile calls the move off. A healthy server answers that stop; one that says nothing for a
** quarter of the start timeout after it is taken as hung as above. Before, a replica that froze
** early in a stream was stopped only at a pause past half the stream budget (or at the budget),
** and found when the buffer no longer held the stream's start. The deadlines assume audio at
** real time: pushed faster, it may age out first. A server that answers only
** once a stream ends (Wyoming) is waited for as above. In STARTING or LISTENING: stops (a stop before the server
** acknowledged the start is sent right after it). With pushed audio, what is still buffered (the
** chunk in progress) is sent before the stop, as spc_client_push_end() does (since 0.11; before,
** it was dropped). In STOPPING with a queued start: cancels the queued start (the audio held
** for it is dropped). A start made after
** spc_client_resume() while the suspended context still finishes waits for it; the audio pushed
** and the stop made meanwhile belong to that start's context. Otherwise:
** SPC_ERROR_INVALID_STATE. While listening (VOICE or WAKEWORD
** activation) it ends listening: an activation in progress is stopped and delivers its last
** results, then the client is IDLE. */
SPC_API spc_status spc_client_stop(spc_client *client);

/* Closes the microphone and the connections, keeping the login. An open context is stopped
** first (its results still arrive), with pushed audio still buffered sent first, as
** spc_client_stop() does (since 0.11; before, the chunk in progress was dropped). A context the server has not opened yet (a connect or login
** still in progress) is abandoned at once: its stop callback fires, with no start and no error
** callback, and the audio pushed into it is dropped. The client state is SUSPENDED at once; the
** state callback's SUSPENDED comes once the connection is let go: after the last results and
** the stop callback of a context that was open (since 0.8; before, ahead of them). SUSPENDED
** already: SPC_ERROR_INVALID_STATE. */
SPC_API spc_status spc_client_suspend(spc_client *client);

/* Leaves SUSPENDED: the client is IDLE. With prepare-on-init the microphone and the connection
** are reopened at once, as spc_client_new() opens them (CONNECTING then READY through the state
** callback; a failure through the error callback); without it they are opened by the next
** spc_client_start(), as after spc_client_new(). Not SUSPENDED: SPC_ERROR_INVALID_STATE. */
SPC_API spc_status spc_client_resume(spc_client *client);

/* The client's state (see CLIENT STATES). SPC_ERROR_INVALID_ARGUMENT for NULL arguments. */
SPC_API spc_status spc_client_get_state(const spc_client *client, spc_state *out_state);

/* The connection state now (see CONNECTION STATES), on demand: the last one the library
** reported, which the state callback may not have delivered yet; SPC_CONNECTION_IDLE before
** the first connection attempt. SPC_ERROR_INVALID_ARGUMENT for NULL arguments. Since 0.8. */
SPC_API spc_status spc_client_get_connection_state(const spc_client *client,
                                                   spc_connection_state *out_state);

/* Pushes frame_count interleaved 16-bit frames (frame_count * channels samples) for a client
** whose source is SPC push audio. Samples pushed outside a context are dropped (while listening
** in VOICE or WAKEWORD activation, between spc_client_start() and spc_client_stop(), all are
** taken; after a start queued behind a pending stop, they are held for its context). The data is copied. frame_count 0 is allowed. Not a push client:
** SPC_ERROR_INVALID_STATE. Never waits for a connect, a login or the library's threads (it
** takes only short locks): with SPC_ACTIVATION_MANUAL and those threads idle, a full chunk is
** encoded and written to the socket on the calling thread; otherwise it is queued. With
** spc_options_set_push_wait_ms() it may wait for room in the replay buffer, and returns
** SPC_ERROR_TIMEOUT (frames not taken) when none came in time. */
SPC_API spc_status spc_client_push_audio(spc_client *client, const int16_t *frames,
                                         size_t frame_count);

/* Marks the end of the pushed audio for the current context: what is buffered is sent and the
** context stops by itself, as when a WAV file ends. In STOPPING with a start queued behind the
** pending stop, it ends that start's context: the context opens with the audio pushed for it
** and stops at once (since 0.11; before, SPC_ERROR_INVALID_STATE, and the fallback, a stop,
** cancelled the queued start with its audio); audio pushed after it is not taken. Not a push
** client, or no context: SPC_ERROR_INVALID_STATE. */
SPC_API spc_status spc_client_push_end(spc_client *client);

/* Blocks until the client is IDLE or SUSPENDED with no start queued and every callback for the
** events so far has returned (the idle callback excepted: see spc_idle_cb), or until timeout_ms
** passes (negative: no limit).
** SPC_OK when idle, SPC_ERROR_TIMEOUT otherwise. From inside one of the client's own callbacks,
** or when another thread frees the client while this waits: SPC_ERROR_INVALID_STATE. */
SPC_API spc_status spc_client_wait_idle(spc_client *client, int32_t timeout_ms);

/* With SPC_DELIVERY_APPLICATION: a file descriptor (an eventfd) that is readable while events
** are pending. Owned by the client: do not read, write or close it. -1 for a NULL client or
** one that delivers on its own thread. */
SPC_API int spc_client_event_fd(const spc_client *client);

/* With SPC_DELIVERY_APPLICATION: runs pending callbacks on the calling thread, in order, at most
** max_events of them (0: all that are pending), and stores how many ran in *out_count (may be
** NULL); an event whose callback is not set counts as run (it is consumed). Never blocks waiting
** for events; concurrent calls run one after the other. Callbacks may call the client's
** functions, except spc_client_free(), spc_client_wait_idle() and this one (a callback run
** inside another would break their order), which return SPC_ERROR_INVALID_STATE there. In
** thread delivery mode: SPC_ERROR_INVALID_STATE.
**
** In application mode spc_client_wait_idle() does not wait for pending callbacks (only this
** call runs them), and spc_client_free() runs the callbacks still pending before it returns, on
** the calling thread: no event is lost and none runs after it. */
SPC_API spc_status spc_client_dispatch(spc_client *client, uint32_t max_events,
                                       uint32_t *out_count);

/* The process-wide descriptor of application-driven I/O (an epoll fd, see APPLICATION-DRIVEN
** NETWORK I/O): readable while a connection of an SPC_IO_APPLICATION client has input, or room
** for output it waits to write. The same for the whole process, whether or not such clients
** exist yet; owned by the library: do not read, write or close it. -1 when the library's
** network thread could not be started (out of file descriptors or threads). Since 0.3. */
SPC_API int spc_io_fd(void);

/* Does, on the calling thread, the network work that is ready for SPC_IO_APPLICATION clients:
** reads responses, answers flow control and keepalive, writes what waited for room; runs no
** callback (the events it produces go to each client's event fd or callback thread, as
** always). Never waits for input; it may wait briefly for the library's network lock while
** another thread does network work. Stores in *out_ready (may be NULL) how many connections
** were ready. Any thread may call it, also from inside a callback; concurrent calls run one
** after the other. With nothing ready it does no network work. SPC_ERROR_INTERNAL when the
** network thread could not be started. Since 0.3. */
SPC_API spc_status spc_io_process(uint32_t *out_ready);

/* spc_io_process(), then, on the calling thread, the callbacks of the events that this network
** work queued for SPC_DELIVERY_APPLICATION clients, in order, as spc_client_dispatch() runs
** them: mostly the segments of the responses it read (those that the client's worker thread was
** not busy to take). Those events do not make the clients' event fds readable. Exceptions,
** announced through the event fd as usual: a client that another thread is dispatching at that
** moment, and one whose callback the calling thread is inside. Events from other threads (start,
** stop, errors, connection states, segments the worker took) still come through the event fds,
** so keep polling them. Stores in *out_ready how many connections were ready and in
** *out_callbacks how many callbacks ran (either may be NULL). Returns what spc_io_process()
** would.
**
** It runs the callbacks of any such client whose connection it served, so use it where one thread
** serves spc_io_fd() and dispatches every SPC_IO_APPLICATION client with application delivery
** (with several dispatching threads, use spc_io_process()). The callbacks may call the client
** functions as in spc_client_dispatch(), spc_io_dispatch() included. Since 0.4. */
SPC_API spc_status spc_io_dispatch(uint32_t *out_ready, uint32_t *out_callbacks);

/* ---------------------------------------------------------------------------------------------
** SEGMENTS
**
** A segment is a stretch of speech between pauses within a context, identified by
** (context id, segment id). Accessors take the segment and an index; an index out of range gives
** NULL, 0 or -1 as written, never a crash. Strings are owned by the segment. Word times are in
** milliseconds from the start of the context's audio, or -1 when the backend gives none
** (Wyoming).
**
** A server's results are untrusted input, bounded in bytes before they are kept: a word, an
** entity's type or value, or an intent of at most 1024 bytes; a segment of at most 64 KiB (its
** text, plus 16 bytes per word and entity); the unfinished segments of a context together at
** most 1 MiB; at most 256 unfinished segments and 16384 words per segment. Speech is far below
** these (a segment ends at a pause; an hour of speech is about 40 KB of text). A server that
** goes past one ends the context with SPC_ERROR_PARSE naming the limit. From 0.8 on, a NUL byte
** in a server's text (a word, an entity, an intent, a context id) is replaced by U+FFFD, so
** that a C string holds all of it; and a result for an audio context other than the one its
** stream carries ends the context with SPC_ERROR_PARSE naming both.
*/

SPC_API const char *spc_segment_context_id(const spc_segment *segment); /* "" for NULL */
SPC_API int32_t spc_segment_id(const spc_segment *segment);              /* -1 for NULL */
SPC_API int spc_segment_is_final(const spc_segment *segment);

/* The words joined with single spaces, in index order; "" when there are none. */
SPC_API const char *spc_segment_transcript(const spc_segment *segment);

SPC_API size_t spc_segment_word_count(const spc_segment *segment);
SPC_API const char *spc_segment_word_text(const spc_segment *segment, size_t i); /* NULL if out of range */
SPC_API int32_t spc_segment_word_index(const spc_segment *segment, size_t i);    /* -1 if out of range */
SPC_API int32_t spc_segment_word_start_ms(const spc_segment *segment, size_t i); /* -1 if out of range or unknown */
SPC_API int32_t spc_segment_word_end_ms(const spc_segment *segment, size_t i);   /* -1 if out of range or unknown */
SPC_API int spc_segment_word_is_final(const spc_segment *segment, size_t i);

/* Confidences, 0.0 to 1.0, where the server gives them: NVIDIA Riva gives one per word and one
** for each final transcript. -1.0 where it gives none: Speechly-protocol and Wyoming servers, a
** Riva server that computes none (protobuf leaves a 0 off the wire, so a 0 reads as none too),
** tentative updates for the transcript's, a NULL segment or an index out of range. Since 0.8. */
SPC_API float spc_segment_word_confidence(const spc_segment *segment, size_t i);
SPC_API float spc_segment_confidence(const spc_segment *segment);

/* The intent, or "" when none is known yet; and whether it is final. */
SPC_API const char *spc_segment_intent(const spc_segment *segment);
SPC_API int spc_segment_intent_is_final(const spc_segment *segment);

/* Entities: type (e.g. "room"), value (e.g. "kitchen"), the word span [start, end) and whether
** the entity is final. */
SPC_API size_t spc_segment_entity_count(const spc_segment *segment);
SPC_API const char *spc_segment_entity_type(const spc_segment *segment, size_t i);  /* NULL if out of range */
SPC_API const char *spc_segment_entity_value(const spc_segment *segment, size_t i); /* NULL if out of range */
SPC_API int32_t spc_segment_entity_start(const spc_segment *segment, size_t i);     /* -1 if out of range */
SPC_API int32_t spc_segment_entity_end(const spc_segment *segment, size_t i);       /* -1 if out of range */
SPC_API int spc_segment_entity_is_final(const spc_segment *segment, size_t i);

/* The segment as one line of JSON, the stable format of the demo's --json output:
** {"type":"segment","context_id":"...","segment_id":0,"final":true,"transcript":"...",
**  "words":[{"text":"...","index":0,"start_ms":0,"end_ms":0,"final":true}],
**  "intent":{"intent":"...","final":true},
**  "entities":[{"type":"...","value":"...","start":0,"end":1,"final":true}]}
** "intent" is null when no intent is known. From 0.8 on, a "confidence" (0 to 1, three decimals)
** follows "transcript" and a word's "final" where the server gave one; absent otherwise, so the
** lines of servers without confidences are unchanged. Owned by the segment; "" for NULL. */
SPC_API const char *spc_segment_json(const spc_segment *segment);

/* A copy the caller owns, to keep a segment past its callback; free it with spc_segment_free().
** NULL for NULL or when out of memory. */
SPC_API spc_segment *spc_segment_copy(const spc_segment *segment);

/* Frees a segment returned by spc_segment_copy(). NULL is a no-op. */
SPC_API void spc_segment_free(spc_segment *segment);

#ifdef __cplusplus
}
#endif

#endif /* SPEECHCLIENT_H */
