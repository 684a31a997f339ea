"""The raw layer: include/speechclient.h in ctypes, each function declared once.

Nothing here owns anything; `client.py` builds the Pythonic layer on top. Handles are typed
pointers to opaque structures, so passing a segment where a client is expected is a ctypes
ArgumentError instead of undefined behaviour.

The library is found through $SPEECHCLIENT_LIBRARY (a path: an explicit choice wins), then the
copy a wheel carries (speechclient/_lib/libspeechclient.so.0), then
ctypes.util.find_library("speechclient"), then the SONAME "libspeechclient.so.0". It is loaded
with ctypes.CDLL, never PyDLL: CDLL releases the GIL around every call, which the library's
callback threads need while the main thread waits inside the library (build.md).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
from ctypes import (CFUNCTYPE, POINTER, c_char_p, c_double, c_float, c_int, c_int16, c_int32, c_int64, c_size_t,
                    c_uint32, c_void_p)
from typing import List

# The header this layer mirrors (SPC_VERSION_* in include/speechclient.h); written from the
# VERSION file by scripts/stamp-version.sh, like the header. Also the wheel's version.
SPC_VERSION_MAJOR = 0
SPC_VERSION_MINOR = 11
SPC_VERSION_PATCH = 0
SPC_VERSION_STRING = "0.11.0"
SPC_VERSION_NUMBER = 11000
SUPPORTED_MAJOR = SPC_VERSION_MAJOR

SONAME = "libspeechclient.so.0"


class Status(enum.IntEnum):
    """spc_status: values fixed forever."""
    OK = 0
    INVALID_ARGUMENT = 1
    INVALID_STATE = 2
    NO_MEMORY = 3
    NETWORK = 4
    TLS = 5
    TIMEOUT = 6
    AUTH = 7
    API = 8
    PARSE = 9
    AUDIO = 10
    INTERNAL = 11


class LogLevel(enum.IntEnum):
    """spc_log_level."""
    NONE = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    DEBUG = 4


class State(enum.IntEnum):
    """spc_state: the client's state."""
    IDLE = 0
    STARTING = 1
    LISTENING = 2
    STOPPING = 3
    SUSPENDED = 4


class ConnectionState(enum.IntEnum):
    """spc_connection_state: reported to the state callback."""
    CONNECTING = 0
    READY = 1
    RECONNECTING = 2
    UNAVAILABLE = 3
    SUSPENDED = 4
    IDLE = 5  # only from Client.connection_state (0.8): no connection opened yet


class Delivery(enum.IntEnum):
    """spc_delivery: where callbacks run."""
    THREAD = 0
    APPLICATION = 1
    SHARED = 2  # since 0.10


class NetworkIO(enum.IntEnum):
    """spc_io: who reads a client's connection (since 0.3)."""
    LIBRARY = 0
    APPLICATION = 1


class Activation(enum.IntEnum):
    """spc_activation: how contexts open (since 0.2)."""
    MANUAL = 0
    VOICE = 1
    WAKEWORD = 2


class Listen(enum.IntEnum):
    """spc_listen_event: what the hands-free pipeline reported (since 0.2)."""
    SPEECH = 0
    SILENCE = 1
    ACTIVATE = 2
    DEACTIVATE = 3
    TIMEOUT = 4


class VadParam(enum.IntEnum):
    """spc_vad_param: the voice activity detector's tunables (since 0.2)."""
    SNR_DB = 0
    NOISE_GATE_DB = 1
    NOISE_LEARN_HALFTIME_MS = 2
    WINDOW_FRAMES = 3
    ACTIVATION_RATIO = 4
    RELEASE_RATIO = 5
    HOLD_MS = 6


# Opaque objects; only pointers to them are ever handled.
class spc_options(ctypes.Structure):
    pass


class spc_client(ctypes.Structure):
    pass


class spc_segment(ctypes.Structure):
    pass


class spc_error(ctypes.Structure):
    pass


class spc_devices(ctypes.Structure):
    pass


options_p = POINTER(spc_options)
devices_p = POINTER(spc_devices)
client_p = POINTER(spc_client)
segment_p = POINTER(spc_segment)
error_p = POINTER(spc_error)

# Enum parameters are C ints.
c_status = c_int
c_log_level = c_int
c_state = c_int
c_connection_state = c_int
c_delivery = c_int
c_activation = c_int
c_listen_event = c_int
c_vad_param = c_int


def _load() -> ctypes.CDLL:
    explicit = os.environ.get("SPEECHCLIENT_LIBRARY")
    if explicit:
        # An explicit path that does not load is an error, not a reason to load another copy.
        try:
            return ctypes.CDLL(explicit)
        except OSError as e:
            raise ImportError(f"speechclient: cannot load libspeechclient from SPEECHCLIENT_LIBRARY={explicit!r}: {e}"
                              ) from e
    tried: List[str] = []
    candidates = []
    # The wheel's own copy (make wheel): before the system's, so a wheel never picks up an
    # older system library.
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_lib", SONAME)
    if os.path.exists(bundled):
        candidates.append(bundled)
    found = ctypes.util.find_library("speechclient")
    if found:
        candidates.append(found)
    candidates.append(SONAME)
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise ImportError("speechclient: cannot load libspeechclient (install the wheel, which carries it, or the "
                      "library: `make install` or the libspeechclient0 package; or set SPEECHCLIENT_LIBRARY to "
                      "the path of libspeechclient.so.0). Tried: " + "; ".join(tried))


lib = _load()
LIBRARY_PATH = getattr(lib, "_name", SONAME)


def _fn(name: str, restype, *argtypes):
    try:
        f = getattr(lib, name)
    except AttributeError:
        raise ImportError(f"speechclient: {LIBRARY_PATH} does not export {name}; it is older than the binding "
                          f"(header {SPC_VERSION_STRING})") from None
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


def _optional_fn(name: str, restype, *argtypes):
    """For functions added to the header after 0.1.0 shipped (connection states, application
    delivery, hands-free listening): None when the loaded library does not export them yet."""
    try:
        return _fn(name, restype, *argtypes)
    except ImportError:
        return None


# ---------------------------------------------------------------------------------------------
# Callback types (user_data is a c_void_p: the Python layer passes an integer key).

# typedef void (*spc_segment_cb)(spc_client *client, const spc_segment *segment, void *user_data);
SEGMENT_CB = CFUNCTYPE(None, client_p, segment_p, c_void_p)
# typedef void (*spc_error_cb)(spc_client *client, const spc_error *error, void *user_data);
ERROR_CB = CFUNCTYPE(None, client_p, error_p, c_void_p)
# typedef void (*spc_start_cb)(spc_client *client, const char *context_id, void *user_data);
START_CB = CFUNCTYPE(None, client_p, c_char_p, c_void_p)
# typedef void (*spc_stop_cb)(spc_client *client, const char *context_id, void *user_data);
STOP_CB = CFUNCTYPE(None, client_p, c_char_p, c_void_p)
# typedef void (*spc_log_cb)(spc_client *client, spc_log_level level, const char *message, void *user_data);
LOG_CB = CFUNCTYPE(None, client_p, c_log_level, c_char_p, c_void_p)
# typedef void (*spc_state_cb)(spc_client *client, spc_connection_state state, int32_t attempt,
#                              int32_t delay_ms, const spc_error *reason, void *user_data);
STATE_CB = CFUNCTYPE(None, client_p, c_connection_state, c_int32, c_int32, error_p, c_void_p)
# typedef void (*spc_listen_cb)(spc_client *client, spc_listen_event event, int64_t position_ms, void *user_data);
LISTEN_CB = CFUNCTYPE(None, client_p, c_listen_event, c_int64, c_void_p)
# typedef void (*spc_level_cb)(spc_client *client, float level_dbfs, int64_t position_ms, void *user_data);
LEVEL_CB = CFUNCTYPE(None, client_p, c_float, c_int64, c_void_p)
# typedef void (*spc_idle_cb)(spc_client *client, void *user_data);
IDLE_CB = CFUNCTYPE(None, client_p, c_void_p)

# ---------------------------------------------------------------------------------------------
# Version

# const char *spc_version(void);
spc_version = _fn("spc_version", c_char_p)
# int32_t spc_version_number(void);
spc_version_number = _fn("spc_version_number", c_int32)

# ---------------------------------------------------------------------------------------------
# Status codes and errors

# const char *spc_status_str(spc_status status);
spc_status_str = _fn("spc_status_str", c_char_p, c_status)
# spc_status spc_error_code(const spc_error *error);
spc_error_code = _fn("spc_error_code", c_status, error_p)
# const char *spc_error_message(const spc_error *error);
spc_error_message = _fn("spc_error_message", c_char_p, error_p)
# int32_t spc_error_grpc_status(const spc_error *error);
spc_error_grpc_status = _fn("spc_error_grpc_status", c_int32, error_p)
# spc_error *spc_error_copy(const spc_error *error);
spc_error_copy = _fn("spc_error_copy", error_p, error_p)
# void spc_error_free(spc_error *error);
spc_error_free = _fn("spc_error_free", None, error_p)

# ---------------------------------------------------------------------------------------------
# Options

# spc_options *spc_options_new(void);
spc_options_new = _fn("spc_options_new", options_p)
# void spc_options_free(spc_options *options);
spc_options_free = _fn("spc_options_free", None, options_p)
# spc_status spc_options_set_server_url(spc_options *options, const char *url);
spc_options_set_server_url = _fn("spc_options_set_server_url", c_status, options_p, c_char_p)
# spc_status spc_options_set_identity_url(spc_options *options, const char *url);
spc_options_set_identity_url = _fn("spc_options_set_identity_url", c_status, options_p, c_char_p)
# spc_status spc_options_set_app_id(spc_options *options, const char *app_id);
spc_options_set_app_id = _fn("spc_options_set_app_id", c_status, options_p, c_char_p)
# spc_status spc_options_set_project_id(spc_options *options, const char *project_id);
spc_options_set_project_id = _fn("spc_options_set_project_id", c_status, options_p, c_char_p)
# spc_status spc_options_set_language(spc_options *options, const char *language);
spc_options_set_language = _fn("spc_options_set_language", c_status, options_p, c_char_p)
# spc_status spc_options_set_device_id(spc_options *options, const char *device_id);
spc_options_set_device_id = _fn("spc_options_set_device_id", c_status, options_p, c_char_p)
# spc_status spc_options_set_cache_dir(spc_options *options, const char *path);
spc_options_set_cache_dir = _fn("spc_options_set_cache_dir", c_status, options_p, c_char_p)
# spc_status spc_options_set_ca_file(spc_options *options, const char *path);
spc_options_set_ca_file = _fn("spc_options_set_ca_file", c_status, options_p, c_char_p)
# spc_status spc_options_set_insecure_tls(spc_options *options, int insecure);
spc_options_set_insecure_tls = _fn("spc_options_set_insecure_tls", c_status, options_p, c_int)
# spc_status spc_options_set_audio_microphone(spc_options *options, const char *device);
spc_options_set_audio_microphone = _fn("spc_options_set_audio_microphone", c_status, options_p, c_char_p)
# spc_status spc_options_set_audio_file(spc_options *options, const char *path);
spc_options_set_audio_file = _fn("spc_options_set_audio_file", c_status, options_p, c_char_p)
# spc_status spc_options_set_audio_push(spc_options *options, uint32_t sample_rate, uint32_t channels);
spc_options_set_audio_push = _fn("spc_options_set_audio_push", c_status, options_p, c_uint32, c_uint32)
# spc_status spc_options_set_chunk_ms(spc_options *options, uint32_t chunk_ms);
spc_options_set_chunk_ms = _fn("spc_options_set_chunk_ms", c_status, options_p, c_uint32)
# spc_status spc_options_set_prepare_on_init(spc_options *options, int prepare);
spc_options_set_prepare_on_init = _fn("spc_options_set_prepare_on_init", c_status, options_p, c_int)
# spc_status spc_options_add_context_option(spc_options *options, const char *key, const char *value);
spc_options_add_context_option = _fn("spc_options_add_context_option", c_status, options_p, c_char_p, c_char_p)
# spc_status spc_options_clear_context_options(spc_options *options);
spc_options_clear_context_options = _fn("spc_options_clear_context_options", c_status, options_p)
# spc_status spc_options_set_reconnect(spc_options *options, uint32_t max_attempts,
#                                      uint32_t initial_delay_ms, uint32_t max_delay_ms);
spc_options_set_reconnect = _fn("spc_options_set_reconnect", c_status, options_p, c_uint32, c_uint32, c_uint32)
# spc_status spc_options_set_replay_buffer_ms(spc_options *options, uint32_t ms);
spc_options_set_replay_buffer_ms = _fn("spc_options_set_replay_buffer_ms", c_status, options_p, c_uint32)
# spc_status spc_options_set_context_limit_ms(spc_options *options, uint32_t ms);
spc_options_set_context_limit_ms = _fn("spc_options_set_context_limit_ms", c_status, options_p, c_uint32)
# spc_status spc_options_set_log_level(spc_options *options, spc_log_level level);
spc_options_set_log_level = _fn("spc_options_set_log_level", c_status, options_p, c_log_level)
# spc_status spc_options_set_segment_cb(spc_options *options, spc_segment_cb cb, void *user_data);
spc_options_set_segment_cb = _fn("spc_options_set_segment_cb", c_status, options_p, SEGMENT_CB, c_void_p)
# spc_status spc_options_set_error_cb(spc_options *options, spc_error_cb cb, void *user_data);
spc_options_set_error_cb = _fn("spc_options_set_error_cb", c_status, options_p, ERROR_CB, c_void_p)
# spc_status spc_options_set_start_cb(spc_options *options, spc_start_cb cb, void *user_data);
spc_options_set_start_cb = _fn("spc_options_set_start_cb", c_status, options_p, START_CB, c_void_p)
# spc_status spc_options_set_stop_cb(spc_options *options, spc_stop_cb cb, void *user_data);
spc_options_set_stop_cb = _fn("spc_options_set_stop_cb", c_status, options_p, STOP_CB, c_void_p)
# spc_status spc_options_set_log_cb(spc_options *options, spc_log_cb cb, void *user_data);
spc_options_set_log_cb = _fn("spc_options_set_log_cb", c_status, options_p, LOG_CB, c_void_p)
# spc_status spc_options_set_state_cb(spc_options *options, spc_state_cb cb, void *user_data);
spc_options_set_state_cb = _optional_fn("spc_options_set_state_cb", c_status, options_p, STATE_CB, c_void_p)
# spc_status spc_options_set_delivery(spc_options *options, spc_delivery delivery);
spc_options_set_delivery = _optional_fn("spc_options_set_delivery", c_status, options_p, c_delivery)
# spc_status spc_options_set_io(spc_options *options, spc_io io); (since 0.3)
spc_options_set_io = _optional_fn("spc_options_set_io", c_status, options_p, c_int)
# int spc_io_fd(void); (since 0.3)
spc_io_fd = _optional_fn("spc_io_fd", c_int)
# spc_status spc_io_process(uint32_t *out_ready); (since 0.3)
spc_io_process = _optional_fn("spc_io_process", c_status, POINTER(c_uint32))
# spc_status spc_io_dispatch(uint32_t *out_ready, uint32_t *out_callbacks); (since 0.4)
spc_io_dispatch = _optional_fn("spc_io_dispatch", c_status, POINTER(c_uint32), POINTER(c_uint32))
# Bounded streams and connection settings (since 0.5).
# spc_status spc_options_set_stream_budget(spc_options *options, uint32_t max_bytes);
spc_options_set_stream_budget = _optional_fn("spc_options_set_stream_budget", c_status, options_p, c_uint32)
# spc_status spc_options_set_drain_timeout_ms(spc_options *options, uint32_t ms);
spc_options_set_drain_timeout_ms = _optional_fn("spc_options_set_drain_timeout_ms", c_status, options_p, c_uint32)
# spc_status spc_options_set_keepalive(spc_options *options, uint32_t interval_ms, uint32_t timeout_ms);
spc_options_set_keepalive = _optional_fn("spc_options_set_keepalive", c_status, options_p, c_uint32, c_uint32)
# spc_status spc_options_set_push_wait_ms(spc_options *options, uint32_t ms);
spc_options_set_push_wait_ms = _optional_fn("spc_options_set_push_wait_ms", c_status, options_p, c_uint32)
# Backends (since 0.6).
# spc_status spc_options_set_model(spc_options *options, const char *model);
spc_options_set_model = _optional_fn("spc_options_set_model", c_status, options_p, c_char_p)
# spc_status spc_options_add_header(spc_options *options, const char *name, const char *value);
spc_options_add_header = _optional_fn("spc_options_add_header", c_status, options_p, c_char_p, c_char_p)
#: max_attempts of spc_options_set_reconnect that never gives up (since 0.5).
SPC_RECONNECT_UNLIMITED = 0xFFFFFFFF
# Hands-free listening (since 0.2).
# spc_status spc_options_set_activation(spc_options *options, spc_activation mode);
spc_options_set_activation = _optional_fn("spc_options_set_activation", c_status, options_p, c_activation)
# spc_status spc_options_set_wakeword(spc_options *options, const char *phrase);
spc_options_set_wakeword = _optional_fn("spc_options_set_wakeword", c_status, options_p, c_char_p)
# spc_status spc_options_set_wakeword_url(spc_options *options, const char *url, const char *name); (0.7)
spc_options_set_wakeword_url = _optional_fn("spc_options_set_wakeword_url", c_status, options_p, c_char_p, c_char_p)
# spc_status spc_options_set_timeouts(spc_options *options, uint32_t connect_ms, uint32_t login_ms,
#                                     uint32_t start_ms); (0.8)
spc_options_set_timeouts = _optional_fn("spc_options_set_timeouts", c_status, options_p, c_uint32, c_uint32, c_uint32)
# spc_status spc_options_set_audio_fd(spc_options *options, int fd, uint32_t sample_rate, uint32_t channels); (0.9)
spc_options_set_audio_fd = _optional_fn("spc_options_set_audio_fd", c_status, options_p, c_int, c_uint32, c_uint32)
# spc_status spc_options_set_vad(spc_options *options, spc_vad_param param, double value);
spc_options_set_vad = _optional_fn("spc_options_set_vad", c_status, options_p, c_vad_param, c_double)
# spc_status spc_options_set_endpointing(spc_options *options, uint32_t pre_roll_ms, uint32_t trailing_silence_ms,
#                                        uint32_t min_activation_ms, uint32_t max_activation_ms);
spc_options_set_endpointing = _optional_fn("spc_options_set_endpointing", c_status, options_p, c_uint32, c_uint32,
                                           c_uint32, c_uint32)
# spc_status spc_options_set_listen_cb(spc_options *options, spc_listen_cb cb, void *user_data);
spc_options_set_listen_cb = _optional_fn("spc_options_set_listen_cb", c_status, options_p, LISTEN_CB, c_void_p)
# spc_status spc_options_set_level_cb(spc_options *options, spc_level_cb cb, void *user_data);
spc_options_set_level_cb = _optional_fn("spc_options_set_level_cb", c_status, options_p, LEVEL_CB, c_void_p)
# spc_status spc_options_set_idle_cb(spc_options *options, spc_idle_cb cb, void *user_data);  (0.11)
spc_options_set_idle_cb = _optional_fn("spc_options_set_idle_cb", c_status, options_p, IDLE_CB, c_void_p)

# ---------------------------------------------------------------------------------------------
# Client

# spc_status spc_client_new(const spc_options *options, spc_client **out_client, spc_error **out_error);
spc_client_new = _fn("spc_client_new", c_status, options_p, POINTER(client_p), POINTER(error_p))
# spc_status spc_client_free(spc_client *client);
spc_client_free = _fn("spc_client_free", c_status, client_p)
# spc_status spc_client_start(spc_client *client);
spc_client_start = _fn("spc_client_start", c_status, client_p)
# spc_status spc_client_stop(spc_client *client);
spc_client_stop = _fn("spc_client_stop", c_status, client_p)
# spc_status spc_client_suspend(spc_client *client);
spc_client_suspend = _fn("spc_client_suspend", c_status, client_p)
# spc_status spc_client_resume(spc_client *client);
spc_client_resume = _fn("spc_client_resume", c_status, client_p)
# spc_status spc_client_get_state(const spc_client *client, spc_state *out_state);
spc_client_get_state = _fn("spc_client_get_state", c_status, client_p, POINTER(c_state))
# spc_status spc_client_push_audio(spc_client *client, const int16_t *frames, size_t frame_count);
spc_client_push_audio = _fn("spc_client_push_audio", c_status, client_p, POINTER(c_int16), c_size_t)
# spc_status spc_client_push_end(spc_client *client);
spc_client_push_end = _fn("spc_client_push_end", c_status, client_p)
# spc_status spc_client_wait_idle(spc_client *client, int32_t timeout_ms);
spc_client_wait_idle = _fn("spc_client_wait_idle", c_status, client_p, c_int32)
# int spc_client_event_fd(const spc_client *client);
spc_client_event_fd = _optional_fn("spc_client_event_fd", c_int, client_p)
# spc_status spc_client_dispatch(spc_client *client, uint32_t max_events, uint32_t *out_count);
spc_client_dispatch = _optional_fn("spc_client_dispatch", c_status, client_p, c_uint32, POINTER(c_uint32))

# ---------------------------------------------------------------------------------------------
# Segments

# const char *spc_segment_context_id(const spc_segment *segment);
spc_segment_context_id = _fn("spc_segment_context_id", c_char_p, segment_p)
# int32_t spc_segment_id(const spc_segment *segment);
spc_segment_id = _fn("spc_segment_id", c_int32, segment_p)
# int spc_segment_is_final(const spc_segment *segment);
spc_segment_is_final = _fn("spc_segment_is_final", c_int, segment_p)
# const char *spc_segment_transcript(const spc_segment *segment);
spc_segment_transcript = _fn("spc_segment_transcript", c_char_p, segment_p)
# size_t spc_segment_word_count(const spc_segment *segment);
spc_segment_word_count = _fn("spc_segment_word_count", c_size_t, segment_p)
# const char *spc_segment_word_text(const spc_segment *segment, size_t i);
spc_segment_word_text = _fn("spc_segment_word_text", c_char_p, segment_p, c_size_t)
# int32_t spc_segment_word_index(const spc_segment *segment, size_t i);
spc_segment_word_index = _fn("spc_segment_word_index", c_int32, segment_p, c_size_t)
# int32_t spc_segment_word_start_ms(const spc_segment *segment, size_t i);
spc_segment_word_start_ms = _fn("spc_segment_word_start_ms", c_int32, segment_p, c_size_t)
# int32_t spc_segment_word_end_ms(const spc_segment *segment, size_t i);
spc_segment_word_end_ms = _fn("spc_segment_word_end_ms", c_int32, segment_p, c_size_t)
# int spc_segment_word_is_final(const spc_segment *segment, size_t i);
spc_segment_word_is_final = _fn("spc_segment_word_is_final", c_int, segment_p, c_size_t)
# const char *spc_segment_intent(const spc_segment *segment);
spc_segment_intent = _fn("spc_segment_intent", c_char_p, segment_p)
# int spc_segment_intent_is_final(const spc_segment *segment);
spc_segment_intent_is_final = _fn("spc_segment_intent_is_final", c_int, segment_p)
# size_t spc_segment_entity_count(const spc_segment *segment);
spc_segment_entity_count = _fn("spc_segment_entity_count", c_size_t, segment_p)
# const char *spc_segment_entity_type(const spc_segment *segment, size_t i);
spc_segment_entity_type = _fn("spc_segment_entity_type", c_char_p, segment_p, c_size_t)
# const char *spc_segment_entity_value(const spc_segment *segment, size_t i);
spc_segment_entity_value = _fn("spc_segment_entity_value", c_char_p, segment_p, c_size_t)
# int32_t spc_segment_entity_start(const spc_segment *segment, size_t i);
spc_segment_entity_start = _fn("spc_segment_entity_start", c_int32, segment_p, c_size_t)
# int32_t spc_segment_entity_end(const spc_segment *segment, size_t i);
spc_segment_entity_end = _fn("spc_segment_entity_end", c_int32, segment_p, c_size_t)
# int spc_segment_entity_is_final(const spc_segment *segment, size_t i);
spc_segment_entity_is_final = _fn("spc_segment_entity_is_final", c_int, segment_p, c_size_t)
# float spc_segment_word_confidence(const spc_segment *segment, size_t i); (0.8)
spc_segment_word_confidence = _optional_fn("spc_segment_word_confidence", c_float, segment_p, c_size_t)
# float spc_segment_confidence(const spc_segment *segment); (0.8)
spc_segment_confidence = _optional_fn("spc_segment_confidence", c_float, segment_p)
# spc_status spc_audio_devices(spc_devices **out_devices); and the list's accessors (0.8)
spc_audio_devices = _optional_fn("spc_audio_devices", c_status, POINTER(devices_p))
spc_devices_count = _optional_fn("spc_devices_count", c_size_t, devices_p)
spc_devices_name = _optional_fn("spc_devices_name", c_char_p, devices_p, c_size_t)
spc_devices_description = _optional_fn("spc_devices_description", c_char_p, devices_p, c_size_t)
spc_devices_free = _optional_fn("spc_devices_free", None, devices_p)
# spc_status spc_client_get_connection_state(const spc_client *client, spc_connection_state *out_state); (0.8)
spc_client_get_connection_state = _optional_fn("spc_client_get_connection_state", c_status, client_p, POINTER(c_int))
# const char *spc_listen_name(spc_client *client); (0.8)
spc_listen_name = _optional_fn("spc_listen_name", c_char_p, client_p)
# const char *spc_segment_json(const spc_segment *segment);
spc_segment_json = _fn("spc_segment_json", c_char_p, segment_p)
# spc_segment *spc_segment_copy(const spc_segment *segment);
spc_segment_copy = _fn("spc_segment_copy", segment_p, segment_p)
# void spc_segment_free(spc_segment *segment);
spc_segment_free = _fn("spc_segment_free", None, segment_p)

#: Whether the loaded library has the state callback and application delivery.
HAS_STATE_AND_DELIVERY = None not in (spc_options_set_state_cb, spc_options_set_delivery, spc_client_event_fd,
                                      spc_client_dispatch)
#: Whether the loaded library has application-driven network I/O (0.3).
HAS_APPLICATION_IO = None not in (spc_options_set_io, spc_io_fd, spc_io_process)
HAS_IO_DISPATCH = spc_io_dispatch is not None
#: Whether the loaded library has stream budgets, drain timeouts and keepalive settings (0.5).
HAS_CONNECTION_SETTINGS = None not in (spc_options_set_stream_budget, spc_options_set_drain_timeout_ms,
                                       spc_options_set_keepalive, spc_options_set_push_wait_ms)
#: Whether the loaded library has hands-free listening and audio levels (0.2).
HAS_HANDS_FREE = None not in (spc_options_set_activation, spc_options_set_wakeword, spc_options_set_vad,
                              spc_options_set_endpointing, spc_options_set_listen_cb, spc_options_set_level_cb)

# ---------------------------------------------------------------------------------------------

LOADED_VERSION = spc_version().decode()
LOADED_VERSION_NUMBER = spc_version_number()
if LOADED_VERSION_NUMBER // 1_000_000 != SUPPORTED_MAJOR:
    raise ImportError(f"speechclient: {LIBRARY_PATH} is libspeechclient {LOADED_VERSION} (version number "
                      f"{LOADED_VERSION_NUMBER}); this binding needs major version {SUPPORTED_MAJOR}")
