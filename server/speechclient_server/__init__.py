"""speechclient_server: the reference server of libspeechclient (Speechly SLU protocol over
gRPC, offline recognition). Run it with `python -m speechclient_server --help`."""

__version__ = "0.2.0"
