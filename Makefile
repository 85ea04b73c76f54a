# Granary - one plain Makefile.
#
#   make            build build/granaryd, build/granaryctl, build/libgranary.{so,a}
#   make test       install missing Debian packages, build, run every test
#   make run        install missing packages, build, run the daemon on the shipped
#                   config with local directories under build/run/
#   make bench      every benchmark, into bench/results/<date>/summary.md
#                   (bench/run.sh); BENCH_MODE=quick (default) or full
#   make SAN=1 ...  the same under AddressSanitizer + UBSan, in build/san/
#   make fuzz       libFuzzer on the codec and config parser, FUZZ_SECONDS=60 each
#   make fuzz-regress  the fuzz targets once over their corpus and past findings
#   make torture    SIGKILL torture with byte checks, restart times (TORTURE_SECONDS)
#   make soak       hundreds of clients, killed and slow ones (SOAK_SECONDS)
#   make install    PREFIX=/usr/local DESTDIR=
#   make clean

CC      ?= cc
PREFIX  ?= /usr/local
SAN     ?= 0

ifeq ($(SAN),1)
B       := build/san
OPT     := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined
LDSAN   := -fsanitize=address,undefined
else
B       := build
OPT     := -O2 -g
LDSAN   :=
endif

PKGS    := libevent libevent_pthreads rocksdb libxxhash libcrypto libibverbs librdmacm
WARN    := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Wundef -Wvla -Wno-unused-parameter
CFLAGS  ?=
# Daemon headers are found by name from any of its folders (daemon/*/):
# every header name in the tree is unique.  -iquote, so that our sched.h
# or log.h never shadows a system header of the same name.
DAEMON_DIRS := $(sort $(dir $(wildcard daemon/*/*.c daemon/*/*.h)))
INCDIRS  := common proto $(DAEMON_DIRS) client
CPPFLAGS += -D_GNU_SOURCE $(addprefix -iquote ,$(INCDIRS))
# The GPU path (client/gpu*.c) builds against the CUDA toolkit's cuda.h
# where it exists (its prototypes then check ours), else against the
# declarations in client/gpu_cuda.h; it never links CUDA (dlopen at run time).
CUDA_HOME ?= /usr/local/cuda
ifneq ($(wildcard $(CUDA_HOME)/include/cuda.h),)
CPPFLAGS += -isystem $(CUDA_HOME)/include
endif
ALLCFLAGS = -std=gnu11 $(OPT) $(WARN) -fPIC -pthread -MMD -MP $(CPPFLAGS) $(CFLAGS)
PKGLIBS  = $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -levent_pthreads -levent -lrocksdb -lxxhash -lcrypto -libverbs -lrdmacm)
CHECKLIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lm -lrt)

PROTO_SRC  := proto/proto.c proto/ckset.c
# common/: the helpers daemon, client and tools share (one copy each).
COMMON_SRC := $(wildcard common/*.c)
DAEMON_SRC := $(wildcard daemon/*/*.c)
CLIENT_SRC := client/granary.c client/dscan.c client/lcache.c client/meta.c client/ckpt.c client/gpu.c client/gpu_drv.c client/gpu_ring.c client/gpu_tier.c
CTL_SRC    := client/granaryctl.c
TEST_SRC   := $(wildcard tests/check_*.c)
# bench/kv.c (memcached and Redis clients) and bench/util.c (clock, random,
# sizes) are helpers linked into every bench program, not programs of their own.
BENCH_LIB  := bench/kv.c bench/util.c
BENCH_SRC  := $(filter-out $(BENCH_LIB),$(wildcard bench/*.c))

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

GRANARYD   := $(B)/granaryd
GRANARYCTL := $(B)/granaryctl
LIBSO      := $(B)/libgranary.so
LIBA       := $(B)/libgranary.a
LIBD       := $(B)/libgranaryd.a
TESTS      := $(patsubst tests/%.c,$(B)/tests/%,$(TEST_SRC))
BENCHES    := $(patsubst bench/%.c,$(B)/bench/%,$(BENCH_SRC))
# Reliability test tools (tests/test_torture.sh, test_faults.sh, test_soak.sh)
TOOLS      := $(B)/tests/torture_reader $(B)/tests/store_fill $(B)/tests/soak_swarm \
              $(B)/tests/isolation_probe $(B)/tests/an_workload $(B)/tests/ckpt_writer \
              $(B)/tests/libfaultinject.so \
              $(B)/tests/cuda/libcuda.so.1 $(B)/tests/gpu_check $(B)/tests/rdma_pair

.PHONY: all deps test unit integration run bench install clean
.DEFAULT_GOAL := all

all: $(GRANARYD) $(GRANARYCTL) $(LIBSO) $(LIBA) $(TESTS) $(BENCHES) $(B)/libgranary_preload.so \
     $(TOOLS)

# Installs whatever Debian packages are missing (apt-get update once first).
deps:
	@scripts/deps.sh

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -c $< -o $@

$(LIBD): $(call obj,$(DAEMON_SRC) $(PROTO_SRC) $(COMMON_SRC))
	@rm -f $@
	ar rcs $@ $^

$(LIBA): $(call obj,$(CLIENT_SRC) $(PROTO_SRC) $(COMMON_SRC))
	@rm -f $@
	ar rcs $@ $^

# The exported symbols are exactly the functions client/granary.h declares:
# the version script is generated from it (common/'s gr__ helpers and
# everything else stay local).  The real file is libgranary.so.0 (the
# soname), with libgranary.so beside it for -lgranary, so that a program
# linked against build/ finds its library there.
$(B)/libgranary.map: client/granary.h
	@mkdir -p $(dir $@)
	{ echo 'GRANARY_0 {'; echo '    global:'; \
	  sed -n 's/^[^ ].*[ *]\(gr_[a-z0-9_]*\)(.*/        \1;/p' $< | sort -u; \
	  echo '    local:'; echo '        *;'; echo '};'; } > $@

$(LIBSO).0: $(call obj,$(CLIENT_SRC) $(PROTO_SRC) $(COMMON_SRC)) $(B)/libgranary.map
	$(CC) -shared -Wl,-soname,libgranary.so.0 -Wl,--version-script=$(B)/libgranary.map \
	    -pthread $(LDSAN) -o $@ $(filter %.o,$^)

$(LIBSO): $(LIBSO).0
	ln -sf libgranary.so.0 $@

# The LD_PRELOAD shim (client/preload.c) with libgranary linked in; the
# archive's symbols are hidden so that only the wrapped libc calls are exported.
$(B)/libgranary_preload.so: $(call obj,client/preload.c client/preload_stdio.c client/preload_mmap.c client/preload_meta.c) $(LIBA)
	$(CC) -shared -pthread $(LDSAN) -Wl,--exclude-libs,ALL -o $@ $^ -ldl

$(GRANARYD): $(call obj,daemon/main.c daemon/reload.c) $(LIBD)
	$(CC) -pthread $(LDSAN) -o $@ $^ $(PKGLIBS) -lm

$(GRANARYCTL): $(call obj,$(CTL_SRC)) $(LIBA)
	$(CC) -pthread $(LDSAN) -o $@ $^

$(B)/tests/%: $(call obj,tests/%.c) $(call obj,tests/testutil.c) $(LIBD) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -pthread $(LDSAN) -o $@ $^ $(CHECKLIBS) $(PKGLIBS) -lm

# The GPU path's tests: a stand-in CUDA driver (tests/cuda_standin.c, on
# host memory) that libgranary loads through $$GRANARY_LIBCUDA, and the
# device check's program (tests/gpu/gpu_check.c: correctness and throughput
# against the real driver in tests/gpu/run.sh, or against the stand-in).
$(B)/tests/cuda/libcuda.so.1: $(call obj,tests/cuda_standin.c)
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread $(LDSAN) -Wl,-soname,libcuda.so.1 -o $@ $^

$(B)/tests/gpu_check: $(call obj,tests/gpu/gpu_check.c) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -pthread $(LDSAN) -o $@ $^ -lm

# The RDMA transport over real verbs, server and client in one program,
# which tests/test_rdma_vm.sh runs in a VM over soft-RoCE: only the
# transport's objects and the verbs libraries, so that the VM needs few.
$(B)/tests/rdma_pair: $(call obj,tests/vm/rdma_pair.c) $(LIBD)
	@mkdir -p $(dir $@)
	$(CC) -pthread $(LDSAN) -o $@ $^ -libverbs -lrdmacm

# The fault-injecting LD_PRELOAD library the fault tests load into granaryd.
$(B)/tests/libfaultinject.so: $(call obj,tests/faultinject.c)
	@mkdir -p $(dir $@)
	$(CC) -shared -pthread $(LDSAN) -o $@ $^ -ldl

$(B)/bench/%: $(call obj,bench/%.c) $(call obj,$(BENCH_LIB)) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -pthread $(LDSAN) -o $@ $^ -lm

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory SAN=1 all
	@scripts/run_tests.sh

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run_local.sh

# BENCH_MODE=quick (default, small datasets) or full; bench/run.sh.
BENCH_MODE ?= quick
bench: deps
	@$(MAKE) --no-print-directory all
	@BENCH_MODE=$(BENCH_MODE) bench/run.sh

# libFuzzer targets (tests/fuzz/): the wire codec and the config parser, built
# with clang whatever CC says, into build/fuzz/.  `make fuzz` installs clang if
# missing and fuzzes each target FUZZ_SECONDS on a copy of its corpus;
# `make fuzz-regress` runs each once over the committed corpus and regression
# inputs (tests/test_fuzz_regress.sh).  tests/fuzz/fuzz.sh does the running.
FUZZ_SECONDS ?= 60
FUZZ_CC      ?= clang
FUZZ_CFLAGS  := -std=gnu11 -g -O1 -fno-omit-frame-pointer \
                -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
                $(WARN) -D_GNU_SOURCE $(addprefix -iquote ,$(INCDIRS))
FUZZERS      := build/fuzz/fuzz_proto build/fuzz/fuzz_config

.PHONY: fuzz fuzz-regress torture soak

# Reliability (docs/ARCHITECTURE.md, "Failure handling"): the crash torture
# for TORTURE_SECONDS (default 180) and the restart-time measurement
# (RESTART_GIB, RESTART_CHUNKS); the soak test for SOAK_SECONDS (default 300).
# Short forms of both run in make test (tests/test_torture.sh, test_soak.sh).
torture: all
	@TORTURE_SECONDS=$${TORTURE_SECONDS:-180} scripts/torture.sh
	@scripts/restart_time.sh

soak: all
	@SOAK_SECONDS=$${SOAK_SECONDS:-300} scripts/soak.sh

build/fuzz/fuzz_proto: tests/fuzz/fuzz_proto.c proto/proto.c proto/proto.h proto/ckset.c proto/ckset.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ tests/fuzz/fuzz_proto.c proto/proto.c proto/ckset.c

FUZZ_CONFIG_SRC := tests/fuzz/fuzz_config.c daemon/core/config.c daemon/core/log.c common/ini.c \
                   common/htab.c common/size.c
build/fuzz/fuzz_config: $(FUZZ_CONFIG_SRC) daemon/core/config.h daemon/core/log.h common/ini.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_CONFIG_SRC)

fuzz:
	@FUZZ_CC=$(FUZZ_CC) tests/fuzz/fuzz.sh deps
	@$(MAKE) --no-print-directory $(FUZZERS)
	@FUZZ_CC=$(FUZZ_CC) tests/fuzz/fuzz.sh run $(FUZZ_SECONDS)

fuzz-regress: $(FUZZERS)
	@tests/fuzz/fuzz.sh regress

# make install [PREFIX=/usr/local] [DESTDIR=]: programs, library, header,
# pkg-config file, man pages, and the systemd unit with its sysusers.d file
# under $(PREFIX)/lib/{systemd/system,sysusers.d}: systemd searches both
# /usr/local/lib/... and /usr/lib/... (on Debian 12 /lib is /usr/lib), so
# the unit always sits beside the granaryd its ExecStart names.  The
# configuration goes to /etc/granary whatever the prefix (granaryd's
# default path), and an existing one is kept.  The directories /run/granary
# and /var/cache/granary come from the unit, so no tmpfiles.d file.
# Afterwards, as README.md's "Installing on a node" says (and
# tests/test_systemd_vm.sh does in a VM): systemd-sysusers granary.conf;
# usermod -aG granary USER; edit /etc/granary/granary.conf;
# systemctl daemon-reload; systemctl enable --now granaryd.
VERSION      ?= 0.1.0
BINDIR       ?= $(PREFIX)/bin
SBINDIR      ?= $(PREFIX)/sbin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
MANDIR       ?= $(PREFIX)/share/man
DOCDIR       ?= $(PREFIX)/share/doc/granary
UNITDIR      ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR  ?= $(PREFIX)/lib/sysusers.d
# The Python package goes where Debian's /usr/bin/python3 looks: the
# version-independent dist-packages under /usr, the versioned one under any
# other prefix (/usr/local/lib/python3.11/dist-packages).
PYTHON       ?= /usr/bin/python3
PYVER        := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR    ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)

install: $(GRANARYD) $(GRANARYCTL) $(LIBSO) $(LIBA) $(B)/libgranary_preload.so
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SBINDIR) $(DESTDIR)$(LIBDIR) \
	    $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(PKGCONFIGDIR) $(DESTDIR)$(DOCDIR) \
	    $(DESTDIR)$(UNITDIR) $(DESTDIR)$(SYSUSERSDIR) $(DESTDIR)/etc/granary \
	    $(DESTDIR)$(PYTHONDIR)/granary $(addprefix $(DESTDIR)$(MANDIR)/man,1 3 5 8)
	install -m 0755 $(B)/libgranary_preload.so $(DESTDIR)$(LIBDIR)/libgranary_preload.so
	install -m 0644 python/granary/*.py $(DESTDIR)$(PYTHONDIR)/granary/
	install -m 0755 $(GRANARYD) $(DESTDIR)$(SBINDIR)/granaryd
	install -m 0755 $(GRANARYCTL) $(DESTDIR)$(BINDIR)/granaryctl
	install -m 0644 $(LIBA) $(DESTDIR)$(LIBDIR)/libgranary.a
	install -m 0755 $(LIBSO).0 $(DESTDIR)$(LIBDIR)/libgranary.so.0
	ln -sf libgranary.so.0 $(DESTDIR)$(LIBDIR)/libgranary.so
	install -m 0644 client/granary.h $(DESTDIR)$(INCLUDEDIR)/granary.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' \
	    -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' -e 's|@VERSION@|$(VERSION)|' \
	    client/granary.pc.in > $(DESTDIR)$(PKGCONFIGDIR)/granary.pc
	chmod 0644 $(DESTDIR)$(PKGCONFIGDIR)/granary.pc
	install -m 0644 man/granaryctl.1 $(DESTDIR)$(MANDIR)/man1/granaryctl.1
	install -m 0644 man/libgranary.3 $(DESTDIR)$(MANDIR)/man3/libgranary.3
	install -m 0644 man/granary.conf.5 $(DESTDIR)$(MANDIR)/man5/granary.conf.5
	install -m 0644 man/granaryd.8 $(DESTDIR)$(MANDIR)/man8/granaryd.8
	sed -e 's|^ExecStart=/usr/sbin/granaryd |ExecStart=$(SBINDIR)/granaryd |' \
	    systemd/granaryd.service > $(DESTDIR)$(UNITDIR)/granaryd.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/granaryd.service
	install -m 0644 systemd/granary.sysusers $(DESTDIR)$(SYSUSERSDIR)/granary.conf
	install -m 0644 config/granary.conf $(DESTDIR)$(DOCDIR)/granary.conf
	@if [ -e $(DESTDIR)/etc/granary/granary.conf ]; then \
	    echo "kept $(DESTDIR)/etc/granary/granary.conf (the shipped one: $(DOCDIR)/granary.conf)"; \
	else \
	    echo "install -m 0644 config/granary.conf $(DESTDIR)/etc/granary/granary.conf"; \
	    install -m 0644 config/granary.conf $(DESTDIR)/etc/granary/granary.conf; \
	fi

clean:
	rm -rf build

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
