"""The raw layer: include/speechclient.h in ctypes, each function declared once.

The library is found through $SPEECHCLIENT_LIBRARY (a path), then ctypes.util.find_library,
then the SONAME. CDLL (not PyDLL) releases the GIL around every call, which the library's
callback threads need (build.md)."""
from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
from ctypes import (CFUNCTYPE, POINTER, c_char_p, c_int, c_int16, c_int32, c_size_t, c_uint32,
                    c_void_p)

SUPPORTED_MAJOR = 0


class Status(enum.IntEnum):
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
    NONE = 0
    ERROR = 1
    WARNING = 2
    INFO = 3
    DEBUG = 4


class State(enum.IntEnum):
    IDLE = 0
    STARTING = 1
    LISTENING = 2
    STOPPING = 3
    SUSPENDED = 4


def _load() -> ctypes.CDLL:
    tried = []
    candidates = []
    if os.environ.get("SPEECHCLIENT_LIBRARY"):
        candidates.append(os.environ["SPEECHCLIENT_LIBRARY"])
    found = ctypes.util.find_library("speechclient")
    if found:
        candidates.append(found)
    candidates.append("libspeechclient.so.0")
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name}: {e}")
    raise ImportError("cannot load libspeechclient (set SPEECHCLIENT_LIBRARY to its path): " + "; ".join(tried))


lib = _load()

# Opaque handles.
options_p = c_void_p
client_p = c_void_p
segment_p = c_void_p
error_p = c_void_p

# typedef void (*spc_segment_cb)(spc_client *, const spc_segment *, void *);
SEGMENT_CB = CFUNCTYPE(None, client_p, segment_p, c_void_p)
# typedef void (*spc_error_cb)(spc_client *, const spc_error *, void *);
ERROR_CB = CFUNCTYPE(None, client_p, error_p, c_void_p)
# typedef void (*spc_start_cb)(spc_client *, const char *context_id, void *);
START_CB = CFUNCTYPE(None, client_p, c_char_p, c_void_p)
# typedef void (*spc_stop_cb)(spc_client *, const char *context_id, void *);
STOP_CB = CFUNCTYPE(None, client_p, c_char_p, c_void_p)
# typedef void (*spc_log_cb)(spc_client *, spc_log_level, const char *message, void *);
LOG_CB = CFUNCTYPE(None, client_p, c_int, c_char_p, c_void_p)


def _fn(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


# const char *spc_version(void);
spc_version = _fn("spc_version", c_char_p)
# int32_t spc_version_number(void);
spc_version_number = _fn("spc_version_number", c_int32)
# const char *spc_status_str(spc_status status);
spc_status_str = _fn("spc_status_str", c_char_p, c_int)

# spc_status spc_error_code(const spc_error *error);
spc_error_code = _fn("spc_error_code", c_int, error_p)
# const char *spc_error_message(const spc_error *error);
spc_error_message = _fn("spc_error_message", c_char_p, error_p)
# int32_t spc_error_grpc_status(const spc_error *error);
spc_error_grpc_status = _fn("spc_error_grpc_status", c_int32, error_p)
# spc_error *spc_error_copy(const spc_error *error);
spc_error_copy = _fn("spc_error_copy", error_p, error_p)
# void spc_error_free(spc_error *error);
spc_error_free = _fn("spc_error_free", None, error_p)

# spc_options *spc_options_new(void);
spc_options_new = _fn("spc_options_new", options_p)
# void spc_options_free(spc_options *options);
spc_options_free = _fn("spc_options_free", None, options_p)
# spc_status spc_options_set_server_url(spc_options *, const char *url);
spc_options_set_server_url = _fn("spc_options_set_server_url", c_int, options_p, c_char_p)
# spc_status spc_options_set_identity_url(spc_options *, const char *url);
spc_options_set_identity_url = _fn("spc_options_set_identity_url", c_int, options_p, c_char_p)
# spc_status spc_options_set_app_id(spc_options *, const char *app_id);
spc_options_set_app_id = _fn("spc_options_set_app_id", c_int, options_p, c_char_p)
# spc_status spc_options_set_project_id(spc_options *, const char *project_id);
spc_options_set_project_id = _fn("spc_options_set_project_id", c_int, options_p, c_char_p)
# spc_status spc_options_set_language(spc_options *, const char *language);
spc_options_set_language = _fn("spc_options_set_language", c_int, options_p, c_char_p)
# spc_status spc_options_set_device_id(spc_options *, const char *device_id);
spc_options_set_device_id = _fn("spc_options_set_device_id", c_int, options_p, c_char_p)
# spc_status spc_options_set_cache_dir(spc_options *, const char *path);
spc_options_set_cache_dir = _fn("spc_options_set_cache_dir", c_int, options_p, c_char_p)
# spc_status spc_options_set_ca_file(spc_options *, const char *path);
spc_options_set_ca_file = _fn("spc_options_set_ca_file", c_int, options_p, c_char_p)
# spc_status spc_options_set_insecure_tls(spc_options *, int insecure);
spc_options_set_insecure_tls = _fn("spc_options_set_insecure_tls", c_int, options_p, c_int)
# spc_status spc_options_set_audio_microphone(spc_options *, const char *device);
spc_options_set_audio_microphone = _fn("spc_options_set_audio_microphone", c_int, options_p, c_char_p)
# spc_status spc_options_set_audio_file(spc_options *, const char *path);
spc_options_set_audio_file = _fn("spc_options_set_audio_file", c_int, options_p, c_char_p)
# spc_status spc_options_set_audio_push(spc_options *, uint32_t sample_rate, uint32_t channels);
spc_options_set_audio_push = _fn("spc_options_set_audio_push", c_int, options_p, c_uint32, c_uint32)
# spc_status spc_options_set_chunk_ms(spc_options *, uint32_t chunk_ms);
spc_options_set_chunk_ms = _fn("spc_options_set_chunk_ms", c_int, options_p, c_uint32)
# spc_status spc_options_set_prepare_on_init(spc_options *, int prepare);
spc_options_set_prepare_on_init = _fn("spc_options_set_prepare_on_init", c_int, options_p, c_int)
# spc_status spc_options_add_context_option(spc_options *, const char *key, const char *value);
spc_options_add_context_option = _fn("spc_options_add_context_option", c_int, options_p, c_char_p, c_char_p)
# spc_status spc_options_clear_context_options(spc_options *);
spc_options_clear_context_options = _fn("spc_options_clear_context_options", c_int, options_p)
# spc_status spc_options_set_reconnect(spc_options *, uint32_t max_attempts, uint32_t initial_delay_ms, uint32_t max_delay_ms);
spc_options_set_reconnect = _fn("spc_options_set_reconnect", c_int, options_p, c_uint32, c_uint32, c_uint32)
# spc_status spc_options_set_replay_buffer_ms(spc_options *, uint32_t ms);
spc_options_set_replay_buffer_ms = _fn("spc_options_set_replay_buffer_ms", c_int, options_p, c_uint32)
# spc_status spc_options_set_context_limit_ms(spc_options *, uint32_t ms);
spc_options_set_context_limit_ms = _fn("spc_options_set_context_limit_ms", c_int, options_p, c_uint32)
# spc_status spc_options_set_log_level(spc_options *, spc_log_level level);
spc_options_set_log_level = _fn("spc_options_set_log_level", c_int, options_p, c_int)
# spc_status spc_options_set_segment_cb(spc_options *, spc_segment_cb, void *user_data);
spc_options_set_segment_cb = _fn("spc_options_set_segment_cb", c_int, options_p, SEGMENT_CB, c_void_p)
# spc_status spc_options_set_error_cb(spc_options *, spc_error_cb, void *user_data);
spc_options_set_error_cb = _fn("spc_options_set_error_cb", c_int, options_p, ERROR_CB, c_void_p)
# spc_status spc_options_set_start_cb(spc_options *, spc_start_cb, void *user_data);
spc_options_set_start_cb = _fn("spc_options_set_start_cb", c_int, options_p, START_CB, c_void_p)
# spc_status spc_options_set_stop_cb(spc_options *, spc_stop_cb, void *user_data);
spc_options_set_stop_cb = _fn("spc_options_set_stop_cb", c_int, options_p, STOP_CB, c_void_p)
# spc_status spc_options_set_log_cb(spc_options *, spc_log_cb, void *user_data);
spc_options_set_log_cb = _fn("spc_options_set_log_cb", c_int, options_p, LOG_CB, c_void_p)

# spc_status spc_client_new(const spc_options *, spc_client **out_client, spc_error **out_error);
spc_client_new = _fn("spc_client_new", c_int, options_p, POINTER(client_p), POINTER(error_p))
# spc_status spc_client_free(spc_client *client);
spc_client_free = _fn("spc_client_free", c_int, client_p)
# spc_status spc_client_start(spc_client *client);
spc_client_start = _fn("spc_client_start", c_int, client_p)
# spc_status spc_client_stop(spc_client *client);
spc_client_stop = _fn("spc_client_stop", c_int, client_p)
# spc_status spc_client_suspend(spc_client *client);
spc_client_suspend = _fn("spc_client_suspend", c_int, client_p)
# spc_status spc_client_resume(spc_client *client);
spc_client_resume = _fn("spc_client_resume", c_int, client_p)
# spc_status spc_client_get_state(const spc_client *client, spc_state *out_state);
spc_client_get_state = _fn("spc_client_get_state", c_int, client_p, POINTER(c_int))
# spc_status spc_client_push_audio(spc_client *, const int16_t *frames, size_t frame_count);
spc_client_push_audio = _fn("spc_client_push_audio", c_int, client_p, POINTER(c_int16), c_size_t)
# spc_status spc_client_push_end(spc_client *client);
spc_client_push_end = _fn("spc_client_push_end", c_int, client_p)
# spc_status spc_client_wait_idle(spc_client *client, int32_t timeout_ms);
spc_client_wait_idle = _fn("spc_client_wait_idle", c_int, client_p, c_int32)

# const char *spc_segment_context_id(const spc_segment *);
spc_segment_context_id = _fn("spc_segment_context_id", c_char_p, segment_p)
# int32_t spc_segment_id(const spc_segment *);
spc_segment_id = _fn("spc_segment_id", c_int32, segment_p)
# int spc_segment_is_final(const spc_segment *);
spc_segment_is_final = _fn("spc_segment_is_final", c_int, segment_p)
# const char *spc_segment_transcript(const spc_segment *);
spc_segment_transcript = _fn("spc_segment_transcript", c_char_p, segment_p)
# size_t spc_segment_word_count(const spc_segment *);
spc_segment_word_count = _fn("spc_segment_word_count", c_size_t, segment_p)
# const char *spc_segment_word_text(const spc_segment *, size_t i);
spc_segment_word_text = _fn("spc_segment_word_text", c_char_p, segment_p, c_size_t)
# int32_t spc_segment_word_index(const spc_segment *, size_t i);
spc_segment_word_index = _fn("spc_segment_word_index", c_int32, segment_p, c_size_t)
# int32_t spc_segment_word_start_ms(const spc_segment *, size_t i);
spc_segment_word_start_ms = _fn("spc_segment_word_start_ms", c_int32, segment_p, c_size_t)
# int32_t spc_segment_word_end_ms(const spc_segment *, size_t i);
spc_segment_word_end_ms = _fn("spc_segment_word_end_ms", c_int32, segment_p, c_size_t)
# int spc_segment_word_is_final(const spc_segment *, size_t i);
spc_segment_word_is_final = _fn("spc_segment_word_is_final", c_int, segment_p, c_size_t)
# const char *spc_segment_intent(const spc_segment *);
spc_segment_intent = _fn("spc_segment_intent", c_char_p, segment_p)
# int spc_segment_intent_is_final(const spc_segment *);
spc_segment_intent_is_final = _fn("spc_segment_intent_is_final", c_int, segment_p)
# size_t spc_segment_entity_count(const spc_segment *);
spc_segment_entity_count = _fn("spc_segment_entity_count", c_size_t, segment_p)
# const char *spc_segment_entity_type(const spc_segment *, size_t i);
spc_segment_entity_type = _fn("spc_segment_entity_type", c_char_p, segment_p, c_size_t)
# const char *spc_segment_entity_value(const spc_segment *, size_t i);
spc_segment_entity_value = _fn("spc_segment_entity_value", c_char_p, segment_p, c_size_t)
# int32_t spc_segment_entity_start(const spc_segment *, size_t i);
spc_segment_entity_start = _fn("spc_segment_entity_start", c_int32, segment_p, c_size_t)
# int32_t spc_segment_entity_end(const spc_segment *, size_t i);
spc_segment_entity_end = _fn("spc_segment_entity_end", c_int32, segment_p, c_size_t)
# int spc_segment_entity_is_final(const spc_segment *, size_t i);
spc_segment_entity_is_final = _fn("spc_segment_entity_is_final", c_int, segment_p, c_size_t)
# const char *spc_segment_json(const spc_segment *);
spc_segment_json = _fn("spc_segment_json", c_char_p, segment_p)
# spc_segment *spc_segment_copy(const spc_segment *);
spc_segment_copy = _fn("spc_segment_copy", segment_p, segment_p)
# void spc_segment_free(spc_segment *);
spc_segment_free = _fn("spc_segment_free", None, segment_p)

if spc_version_number() // 1_000_000 != SUPPORTED_MAJOR:
    raise ImportError(f"libspeechclient {spc_version().decode()} is not ABI version {SUPPORTED_MAJOR}")
