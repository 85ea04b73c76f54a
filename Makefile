# Granary - one plain Makefile.
#
#   make            build build/granaryd, build/granaryctl, build/libgranary.{so,a}
#   make test       install missing Debian packages, build, run every test
#   make run        install missing packages, build, run the daemon on the shipped
#                   config with local directories under build/run/
#   make bench      the read-throughput benchmark (bench/README.md)
#   make SAN=1 ...  the same under AddressSanitizer + UBSan, in build/san/
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

PKGS    := libevent libevent_pthreads rocksdb libxxhash
WARN    := -Wall -Wextra -Werror -Wshadow -Wpointer-arith -Wstrict-prototypes \
           -Wmissing-prototypes -Wformat=2 -Wundef -Wvla -Wno-unused-parameter
CFLAGS  ?=
CPPFLAGS += -D_GNU_SOURCE -Iproto -Idaemon -Iclient
ALLCFLAGS = -std=gnu11 $(OPT) $(WARN) -fPIC -pthread -MMD -MP $(CPPFLAGS) $(CFLAGS)
PKGLIBS  = $(shell pkg-config --libs $(PKGS) 2>/dev/null || echo -levent_pthreads -levent -lrocksdb -lxxhash)
CHECKLIBS = $(shell pkg-config --libs check 2>/dev/null || echo -lcheck -lsubunit -lm -lrt)

PROTO_SRC  := proto/proto.c
DAEMON_SRC := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
CLIENT_SRC := client/granary.c
CTL_SRC    := client/granaryctl.c
TEST_SRC   := $(wildcard tests/check_*.c)
BENCH_SRC  := $(wildcard bench/*.c)

obj = $(patsubst %.c,$(B)/obj/%.o,$(1))

GRANARYD   := $(B)/granaryd
GRANARYCTL := $(B)/granaryctl
LIBSO      := $(B)/libgranary.so
LIBA       := $(B)/libgranary.a
LIBD       := $(B)/libgranaryd.a
TESTS      := $(patsubst tests/%.c,$(B)/tests/%,$(TEST_SRC))
BENCHES    := $(patsubst bench/%.c,$(B)/bench/%,$(BENCH_SRC))

.PHONY: all deps test unit integration run bench install clean
.DEFAULT_GOAL := all

all: $(GRANARYD) $(GRANARYCTL) $(LIBSO) $(LIBA) $(TESTS) $(BENCHES)

# Installs whatever Debian packages are missing (apt-get update once first).
deps:
	@scripts/deps.sh

$(B)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALLCFLAGS) -c $< -o $@

$(LIBD): $(call obj,$(DAEMON_SRC) $(PROTO_SRC))
	@rm -f $@
	ar rcs $@ $^

$(LIBA): $(call obj,$(CLIENT_SRC) $(PROTO_SRC))
	@rm -f $@
	ar rcs $@ $^

$(LIBSO): $(call obj,$(CLIENT_SRC) $(PROTO_SRC))
	$(CC) -shared -Wl,-soname,libgranary.so.0 -Wl,--version-script=client/libgranary.map \
	    -pthread $(LDSAN) -o $@ $^

$(GRANARYD): $(call obj,daemon/main.c) $(LIBD)
	$(CC) -pthread $(LDSAN) -o $@ $^ $(PKGLIBS) -lm

$(GRANARYCTL): $(call obj,$(CTL_SRC)) $(LIBA)
	$(CC) -pthread $(LDSAN) -o $@ $^

$(B)/tests/%: $(call obj,tests/%.c) $(call obj,tests/testutil.c) $(LIBD) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -pthread $(LDSAN) -o $@ $^ $(CHECKLIBS) $(PKGLIBS) -lm

$(B)/bench/%: $(call obj,bench/%.c) $(LIBA)
	@mkdir -p $(dir $@)
	$(CC) -pthread $(LDSAN) -o $@ $^ -lm

test: deps
	@$(MAKE) --no-print-directory all
	@$(MAKE) --no-print-directory SAN=1 all
	@scripts/run_tests.sh

run: deps
	@$(MAKE) --no-print-directory all
	@scripts/run_local.sh

bench: deps
	@$(MAKE) --no-print-directory all
	@bench/run.sh

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/lib \
	    $(DESTDIR)$(PREFIX)/include $(DESTDIR)/etc/granary
	install -m 0755 $(GRANARYD) $(DESTDIR)$(PREFIX)/sbin/granaryd
	install -m 0755 $(GRANARYCTL) $(DESTDIR)$(PREFIX)/bin/granaryctl
	install -m 0644 $(LIBA) $(DESTDIR)$(PREFIX)/lib/libgranary.a
	install -m 0755 $(LIBSO) $(DESTDIR)$(PREFIX)/lib/libgranary.so.0
	ln -sf libgranary.so.0 $(DESTDIR)$(PREFIX)/lib/libgranary.so
	install -m 0644 client/granary.h $(DESTDIR)$(PREFIX)/include/granary.h
	install -m 0644 config/granary.conf $(DESTDIR)/etc/granary/granary.conf

clean:
	rm -rf build

-include $(shell find $(B)/obj -name '*.d' 2>/dev/null)
