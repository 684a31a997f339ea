# libspeechclient: build, test, install.
#   make                      release libspeechclient.so (static Swift runtime) and the demo in build/
#   make test                 every test suite (Swift, C, ABI, Python)
#   make install PREFIX=/usr/local DESTDIR=
# The one version number (scripts/stamp-version.sh writes it into the header and the binding).
VERSION     := $(shell tr -d ' \n' < VERSION)
# The SONAME number is the major version (docs/ABI.md).
SOVERSION   := $(firstword $(subst ., ,$(VERSION)))
PREFIX      ?= /usr/local
LIBDIR      ?= $(PREFIX)/lib
DESTDIR     ?=
SWIFT       ?= swift
CC          ?= cc
VENV        ?= .venv
PYTHON      ?= $(if $(wildcard $(VENV)/bin/python),$(VENV)/bin/python,python3)
BUILD       := build
RELEASE_DIR := .build-release
LIB         := $(BUILD)/libspeechclient.so.$(VERSION)
DEMO        := $(BUILD)/speechclient-demo
STRIP       ?= strip

# Generic types' metadata through their accessor functions, not rebuilt from mangled names:
# demangling (and a scan of every protocol conformance for each new requirement) was most of
# the library's own CPU before the first `started` (docs/performance.md, cold start).
SWIFT_STARTUP_FLAGS := -Xswiftc -Xfrontend -Xswiftc -disable-concrete-type-metadata-mangled-name-accessors
# Flags measured in ../shared/docs/build.md: a .so that runs without the Swift toolchain.
SWIFT_RELEASE_FLAGS := -c release --product speechclient --scratch-path $(RELEASE_DIR) \
	--disable-local-rpath -Xswiftc -static-stdlib \
	-Xlinker -soname=libspeechclient.so.$(SOVERSION) \
	-Xlinker --version-script=$(CURDIR)/Sources/SpeechClientCAPI/exports.map \
	-Xlinker -z -Xlinker defs -Xlinker -z -Xlinker nodelete \
	-Xlinker -z -Xlinker now -Xlinker -z -Xlinker relro \
	$(SWIFT_STARTUP_FLAGS)

.PHONY: all lib demo examples wheel test test-swift test-c test-abi test-python test-server test-e2e test-backends test-faults test-proxies test-old-library test-wheel install clean

all: lib demo

# Always a clean release build: SwiftPM does not notice edits to the public header
# (build.md), and 6.3 reports "unknown build description" when a release folder built with
# these flags is reused.
lib:
	scripts/stamp-version.sh
	rm -rf $(RELEASE_DIR)
	$(SWIFT) build $(SWIFT_RELEASE_FLAGS)
	mkdir -p $(BUILD)
	# A new file renamed over the old one: programs running on the old library keep their copy.
	cp $(RELEASE_DIR)/release/libspeechclient.so $(LIB).tmp
	$(STRIP) --strip-unneeded $(LIB).tmp
	mv -f $(LIB).tmp $(LIB)
	ln -sf libspeechclient.so.$(VERSION) $(BUILD)/libspeechclient.so.$(SOVERSION)
	ln -sf libspeechclient.so.$(SOVERSION) $(BUILD)/libspeechclient.so

demo: lib
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -pedantic -Iinclude bindings/c/speechclient-demo.c \
		-L$(BUILD) -lspeechclient -Wl,-rpath,'$$ORIGIN' -o $(DEMO).tmp
	mv -f $(DEMO).tmp $(DEMO)

# The examples in bindings/c/examples/, against the library already in build/: they never
# rebuild it (a missing $(LIB) is an error; `make lib` first).
EXAMPLES := $(BUILD)/poll-loop
examples: $(EXAMPLES)

$(BUILD)/poll-loop: bindings/c/examples/poll-loop.c include/speechclient.h $(LIB)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -pedantic -Iinclude $< \
		-L$(BUILD) -lspeechclient -Wl,-rpath,'$$ORIGIN' -o $@.tmp
	mv -f $@.tmp $@

# NO_BUILD=1 installs what is already in build/ (the C suite installs right after `make lib`).
install: $(if $(NO_BUILD),,all)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LIBDIR)/pkgconfig \
		$(DESTDIR)$(PREFIX)/bin
	install -m 0644 $(LIB) $(DESTDIR)$(LIBDIR)/
	ln -sf libspeechclient.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libspeechclient.so.$(SOVERSION)
	ln -sf libspeechclient.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libspeechclient.so
	install -m 0644 include/speechclient.h $(DESTDIR)$(PREFIX)/include/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@VERSION@|$(VERSION)|' \
		pkgconfig/speechclient.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/speechclient.pc
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -pedantic -Iinclude bindings/c/speechclient-demo.c \
		-L$(BUILD) -lspeechclient -o $(DESTDIR)$(PREFIX)/bin/speechclient-demo
	$(STRIP) $(DESTDIR)$(PREFIX)/bin/speechclient-demo

test: test-swift lib test-c test-abi test-python test-old-library test-server test-e2e test-backends test-faults test-proxies test-packaging test-wheel

test-swift:
	$(SWIFT) test

test-c: lib
	Tests/c/run.sh

test-abi: lib
	scripts/stamp-version.sh --check
	Tests/packaging/test-stamp-version.sh
	Tests/c/abi-check.sh $(LIB)

test-python: lib demo
	SPEECHCLIENT_LIBRARY=$(CURDIR)/$(LIB) $(PYTHON) -m pytest -q Tests/python

# The binding against the oldest release it supports: 0.1.0, built from git history (the last
# commit of 0.1) with that commit's own Makefile. What 0.1 has must work; what it lacks must be
# a clear error naming the release (Tests/python/test_older_library.py).
OLDER_RELEASE        := 0.1.0
OLDER_RELEASE_COMMIT := 4dea9f493e5234f84f070d97fb77b4cd577bb091
OLDER_DIR            := $(BUILD)/older-$(OLDER_RELEASE)
test-old-library:
	@git cat-file -e $(OLDER_RELEASE_COMMIT)^{commit} 2>/dev/null || { echo "test-old-library: commit \
	$(OLDER_RELEASE_COMMIT) ($(OLDER_RELEASE)) is not in this clone: it needs the full history \
	(git fetch --unshallow)"; exit 1; }
	rm -rf $(CURDIR)/$(OLDER_DIR)
	mkdir -p $(CURDIR)/$(OLDER_DIR)
	git archive $(OLDER_RELEASE_COMMIT) | tar -x -C $(CURDIR)/$(OLDER_DIR)
	# Its own Makefile, with its own defaults: nothing of this make's command line leaks in.
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL $(MAKE) -C $(CURDIR)/$(OLDER_DIR) lib SWIFT=$(SWIFT) \
		BUILD=build RELEASE_DIR=.build-release
	test "$$(readlink $(CURDIR)/$(OLDER_DIR)/build/libspeechclient.so.0)" = libspeechclient.so.$(OLDER_RELEASE)
	SPEECHCLIENT_LIBRARY=$(CURDIR)/$(OLDER_DIR)/build/libspeechclient.so.0 SPEECHCLIENT_OLDER_RELEASE=$(OLDER_RELEASE) \
		$(PYTHON) -m pytest -q Tests/python/test_older_library.py

# The reference server driven by grpcio's own client.
test-server:
	$(PYTHON) -m pytest -q server/tests

# Faults on loopback: a proxy that drops the connection mid-utterance (issue 5).
test-faults: lib
	SPEECHCLIENT_LIBRARY=$(CURDIR)/$(LIB) $(PYTHON) -m pytest -q Tests/faults

# The real proxies (issue 18): Debian's nginx (grpc_pass) and HAProxy 2.6 (h2 both sides), run
# from a temp dir on 127.0.0.1 in front of three reference-server replicas; every phrase of a
# 24-phrase recording once, in order, through a reload, a quit, a killed replica and a server
# timeout. Prints PROXY_RESULT lines. SPEECHCLIENT_LIBRARY / SPEECHCLIENT_DEMO point the suite
# at another build (docs/deploying.md).
test-proxies: demo
	SPEECHCLIENT_LIBRARY=$(CURDIR)/$(LIB) SPEECHCLIENT_DEMO=$(CURDIR)/$(DEMO) $(PYTHON) -m pytest -q -s Tests/proxies

# The demo and the library against the reference server with synthesized speech.
test-e2e: demo
	SPEECHCLIENT_LIBRARY=$(CURDIR)/$(LIB) $(PYTHON) -m pytest -q Tests/e2e

# Other backends against their real servers (issue 20): wyoming-faster-whisper and
# wyoming-openwakeword from their own venvs (scripts/setup-debian.sh), a scripted Wyoming server.
test-backends: demo
	SPEECHCLIENT_LIBRARY=$(CURDIR)/$(LIB) $(PYTHON) -m pytest -q Tests/backends

# Packaging (issue 7): `make install DESTDIR=` layouts, pkg-config, spc_version_number() against the
# installed header, docs/ABI.md, debian/libspeechclient0.symbols. The slow .deb test on a clean
# Debian root is scripts/deb-smoke.sh, not part of `make test`.
.PHONY: test-packaging
test-packaging: lib
	CC="$(CC)" PYTHON="$(PYTHON)" Tests/packaging/check-install.sh

# The Python package with the library inside (issue 22): dist/speechclient-<version>-py3-none-
# manylinux_<glibc>_<arch>.whl, and the reference server's wheel. See scripts/build-wheel.sh.
wheel: lib
	scripts/build-wheel.sh dist

# The wheel installed into a fresh venv, with no libspeechclient on the system, transcribing
# against the reference server; the server's wheel installed from PyPI dependencies.
test-wheel: lib
	PYTHON="$(PYTHON)" Tests/packaging/test-wheel.sh

clean:
	rm -rf $(BUILD) $(RELEASE_DIR) .build

# Fuzzers (libFuzzer + AddressSanitizer): each target runs FUZZ_SECONDS from its committed seeds.
FUZZ_SECONDS ?= 60
# FUZZ_RUNS=N stops each target after N executions instead (whichever limit comes first).
FUZZ_RUNS ?=
FUZZ_TARGETS := FuzzProtobuf FuzzJSON FuzzURL FuzzWAV FuzzFraming FuzzPipeline FuzzWyoming FuzzAssembler
FUZZ_FLAGS   := -c release --scratch-path ../.build-fuzz -Xswiftc -sanitize=fuzzer,address \
	-Xswiftc -parse-as-library -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld
.PHONY: fuzz
fuzz:
	set -e; for t in $(FUZZ_TARGETS); do \
		(cd fuzz && $(SWIFT) build $(FUZZ_FLAGS) --product $$t); \
		mkdir -p .build-fuzz/corpus/$$t fuzz/corpus/$$t; \
		if [ $$t = FuzzWAV ]; then python3 fuzz/wav_seeds.py .build-fuzz/corpus/$$t; fi; \
		if [ $$t = FuzzPipeline ]; then python3 fuzz/pipeline_seeds.py .build-fuzz/corpus/$$t; fi; \
		if ! .build-fuzz/release/$$t -max_total_time=$(FUZZ_SECONDS) $$([ $$t = FuzzAssembler ] && echo -malloc_limit_mb=64) $(if $(FUZZ_RUNS),-runs=$(FUZZ_RUNS)) -print_final_stats=1 \
			.build-fuzz/corpus/$$t fuzz/corpus/$$t > .build-fuzz/$$t.log 2>&1; then \
			tail -40 .build-fuzz/$$t.log; echo "fuzz: $$t FAILED"; exit 1; fi; \
		echo "fuzz: $$t $$(grep -E 'stat::number_of_executed_units' .build-fuzz/$$t.log) $$(grep -oE 'cov: [0-9]+' .build-fuzz/$$t.log | tail -1)"; \
	done

# The Swift test suite under ThreadSanitizer and AddressSanitizer. Fresh scratch folders each
# time: SwiftPM 6.3 sometimes loses its build description in a reused sanitizer folder.
.PHONY: sanitize
sanitize:
	rm -rf .build-tsan .build-asan
	$(SWIFT) test --sanitize=thread --scratch-path .build-tsan
	LSAN_OPTIONS=suppressions=$(CURDIR)/Tests/lsan.supp $(SWIFT) test --sanitize=address --scratch-path .build-asan

# Benchmarks (issue 6), not part of `make test`: the library driven from C against a grpcio and a
# grpc++ client on one loopback sink server. Prints the table and BENCH lines; writes
# bench/out/{table.md,bench.txt,results.json,latency.png}. See bench/README.md. Then the reference
# server's real-time factor with Whisper, 1, 2 and 4 streams on a long recording (issue 24), the
# CPU by backend (issue 20) and the cost of one segment update as the segment grows (issue 23).
# First scripts/setup-bench.sh (issue 21): the bench's Debian packages (grpc++ for the C++ peer and
# sink) and the venv's Python packages, each only when missing, and the C++ programs. A missing
# peer fails the bench (bench/README.md). The venv's python by name: make expands every line of a
# recipe before the first runs, so $(PYTHON) would not see a venv the set-up has just created.
.PHONY: bench
bench:
	VENV=$(VENV) scripts/setup-bench.sh
	$(VENV)/bin/python bench/run.py
	$(VENV)/bin/python bench/rotation.py
	$(VENV)/bin/python bench/server_rtf.py
	$(VENV)/bin/python bench/backends.py
	$(VENV)/bin/python bench/update_cost.py

# Soak (issue 9): 200 real-time streams for 10 minutes, RSS sampled; prints the slope.
.PHONY: soak
soak:
	VENV=$(VENV) scripts/setup-bench.sh
	$(VENV)/bin/python bench/soak.py
