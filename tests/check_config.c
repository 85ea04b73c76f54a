/*
 * check_config.c - tests of daemon/config.c: defaults, every key, sizes, the
 * INI syntax (comments, quotes, CRLF, long lines, no final newline), error
 * messages with their line numbers, roots normalisation, dump -> parse round
 * trips, config_load and the shipped config/granary.conf.
 *
 * Run from the repository root (the shipped config is read relative to it).
 */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "testutil.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)

/* Each test works on fresh copies; the struct is 64+ KiB, so not the stack. */
static gr_config *cfg, *cfg2;
static char err[1024];

static void setup(void)
{
    cfg = malloc(sizeof(*cfg));
    cfg2 = malloc(sizeof(*cfg2));
    ck_assert_ptr_nonnull(cfg);
    ck_assert_ptr_nonnull(cfg2);
    config_defaults(cfg);
    config_defaults(cfg2);
    err[0] = '\0';
}

static void teardown(void)
{
    free(cfg);
    free(cfg2);
    cfg = cfg2 = NULL;
}

/* Parse NUL-terminated text as "granary.conf" on top of cfg. */
static int parse(const char *text)
{
    err[0] = '\0';
    return config_parse(cfg, text, strlen(text), "granary.conf", err, sizeof(err));
}

/* Parse text that must fail, and check the whole message. */
static void parse_fails(const char *text, const char *msg)
{
    ck_assert_int_eq(parse(text), -EINVAL);
    ck_assert_str_eq(err, msg);
}

/* config_set that must fail, message must contain want. */
static void set_fails(const char *sec, const char *key, const char *val, const char *want)
{
    err[0] = '\0';
    ck_assert_int_eq(config_set(cfg, sec, key, val, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, want) != NULL, "\"%s\" not in \"%s\"", want, err);
}

static void set_ok(const char *sec, const char *key, const char *val)
{
    ck_assert_msg(config_set(cfg, sec, key, val, err, sizeof(err)) == 0, "%s.%s=%s: %s", sec,
                  key, val, err);
}

/* Dump c into a malloc'd string. */
static char *dump(const gr_config *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    ck_assert_ptr_nonnull(f);
    config_dump(c, f);
    ck_assert_int_eq(fclose(f), 0);
    return buf;
}

/* Dump cfg, parse the dump over cfg2 (set to defaults first), compare.
 * Leaves cfg2 equal to cfg. */
static void check_round_trip(void)
{
    char *text = dump(cfg);

    config_defaults(cfg2);
    ck_assert_msg(config_parse(cfg2, text, strlen(text), "dump", err, sizeof(err)) == 0,
                  "%s\n%s", err, text);
    ck_assert_msg(memcmp(cfg, cfg2, sizeof(*cfg)) == 0, "round trip differs:\n%s", text);
    free(text);
}

START_TEST(test_defaults)
{
    ck_assert_str_eq(cfg->socket, "/run/granary/granary.sock");
    ck_assert_uint_eq(cfg->socket_mode, 0660);
    ck_assert_int_eq(cfg->io_threads, 16);
    ck_assert_int_eq(cfg->log_level, LOG_INFO);
    ck_assert_int_eq(cfg->max_clients, 1024);
    ck_assert_int_eq(cfg->nroots, 1);
    ck_assert_str_eq(cfg->roots[0], "/mnt");
    ck_assert_uint_eq(cfg->chunk_size, 4 * MIB);
    ck_assert(cfg->attr_ttl == 1.0);
    ck_assert_uint_eq(cfg->dram_capacity, GIB);
    ck_assert_str_eq(cfg->dram_policy, "lru");
    ck_assert_str_eq(cfg->nvme_path, "/var/cache/granary");
    ck_assert_uint_eq(cfg->nvme_capacity, 10 * GIB);
    ck_assert_str_eq(cfg->nvme_policy, "lru");
    ck_assert_uint_eq(cfg->nvme_inline_max, 64 * KIB);
    ck_assert_str_eq(cfg->metrics_listen, "127.0.0.1:9464");
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);
    /* Deterministic down to unused bytes, so memcmp compares configs. */
    ck_assert_int_eq(memcmp(cfg, cfg2, sizeof(*cfg)), 0);
}
END_TEST

START_TEST(test_every_key)
{
    const char *text =
        "[daemon]\n"
        "socket = /tmp/g.sock\n"
        "socket_mode = 0600\n"
        "io_threads = 32\n"
        "log_level = debug\n"
        "max_clients = 65536\n"
        "[source]\n"
        "roots = /data/a:/data/b/\n"
        "chunk_size = 1M\n"
        "attr_ttl = 0.5\n"
        "[dram]\n"
        "capacity = 64G\n"
        "policy = lru\n"
        "[nvme]\n"
        "path = /nvme/cache\n"
        "capacity = 2T\n"
        "policy = lru\n"
        "inline_max = 0\n";

    ck_assert_msg(parse(text) == 0, "%s", err);
    ck_assert_str_eq(cfg->socket, "/tmp/g.sock");
    ck_assert_uint_eq(cfg->socket_mode, 0600);
    ck_assert_int_eq(cfg->io_threads, 32);
    ck_assert_int_eq(cfg->log_level, LOG_DEBUG);
    ck_assert_int_eq(cfg->max_clients, 65536);
    ck_assert_int_eq(cfg->nroots, 2);
    ck_assert_str_eq(cfg->roots[0], "/data/a");
    ck_assert_str_eq(cfg->roots[1], "/data/b");
    ck_assert_uint_eq(cfg->chunk_size, MIB);
    ck_assert(cfg->attr_ttl == 0.5);
    ck_assert_uint_eq(cfg->dram_capacity, 64 * GIB);
    ck_assert_str_eq(cfg->dram_policy, "lru");
    ck_assert_str_eq(cfg->nvme_path, "/nvme/cache");
    ck_assert_uint_eq(cfg->nvme_capacity, 2 * GIB * KIB);
    ck_assert_str_eq(cfg->nvme_policy, "lru");
    ck_assert_uint_eq(cfg->nvme_inline_max, 0);
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);
    check_round_trip();
}
END_TEST

START_TEST(test_empty_text)
{
    ck_assert_int_eq(config_parse(cfg, NULL, 0, "empty", err, sizeof(err)), 0);
    ck_assert_int_eq(memcmp(cfg, cfg2, sizeof(*cfg)), 0);
    ck_assert_int_eq(parse("\n\n   \n\t\n"), 0);
    ck_assert_int_eq(memcmp(cfg, cfg2, sizeof(*cfg)), 0);
}
END_TEST

START_TEST(test_sizes)
{
    static const struct { const char *s; uint64_t v; } good[] = {
        { "4M", 4 * MIB }, { "4m", 4 * MIB }, { "4MiB", 4 * MIB }, { "4mib", 4 * MIB },
        { "4MB", 4 * MIB }, { "4096", 4096 }, { "4096B", 4096 }, { "0", 0 },
        { "1T", GIB * KIB }, { "64k", 64 * KIB }, { "2G", 2 * GIB }, { "007K", 7 * KIB },
        { "18446744073709551615", UINT64_MAX }, { "16777215T", 16777215 * GIB * KIB },
    };
    static const char *const bad[] = {
        "", "4 M", " 4M", "4M ", "-1", "+1", "1.5M", "M", "4X", "4MBB", "4iB", "4Mi",
        "18446744073709551616", "16777216T", "99999999999999999999999", "0x10", "4K4",
    };
    uint64_t v;

    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        v = 12345;
        ck_assert_msg(config_parse_size(good[i].s, &v) == 0, "\"%s\"", good[i].s);
        ck_assert_msg(v == good[i].v, "\"%s\" gave %llu", good[i].s, (unsigned long long)v);
    }
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = 12345;
        ck_assert_msg(config_parse_size(bad[i], &v) == -EINVAL, "\"%s\" accepted", bad[i]);
        ck_assert_uint_eq(v, 12345);
    }
}
END_TEST

START_TEST(test_size_keys)
{
    set_ok("source", "chunk_size", "64K");
    ck_assert_uint_eq(cfg->chunk_size, 64 * KIB);
    set_ok("source", "chunk_size", "256M");
    ck_assert_uint_eq(cfg->chunk_size, 256 * MIB);
    parse_fails("[source]\nchunk_size = 3M\n",
                "granary.conf:2: [source] chunk_size: \"3M\" is not a power of two between "
                "64K and 256M");
    set_fails("source", "chunk_size", "32K", "not a power of two between 64K and 256M");
    set_fails("source", "chunk_size", "512M", "not a power of two between 64K and 256M");
    set_fails("source", "chunk_size", "4 M", "is not a size");
    set_fails("source", "chunk_size", "", "is not a size");
    set_fails("source", "chunk_size", "99999999999999999999", "is too large");
    set_fails("dram", "capacity", "512K", "\"512K\" is below the minimum 1M");
    set_ok("dram", "capacity", "1M");
    set_ok("nvme", "capacity", "0");
    set_ok("nvme", "inline_max", "1M");
    set_fails("nvme", "inline_max", "1049k", "\"1049k\" is not between 0 and 1M");
    /* A failed set leaves the old value. */
    ck_assert_uint_eq(cfg->nvme_inline_max, MIB);
    ck_assert_uint_eq(cfg->chunk_size, 256 * MIB);
}
END_TEST

START_TEST(test_other_types)
{
    set_ok("daemon", "socket_mode", "777");
    ck_assert_uint_eq(cfg->socket_mode, 0777);
    set_ok("daemon", "socket_mode", "0");
    ck_assert_uint_eq(cfg->socket_mode, 0);
    set_fails("daemon", "socket_mode", "0668", "is not an octal mode");
    set_fails("daemon", "socket_mode", "01777", "is not an octal mode");
    set_fails("daemon", "socket_mode", "", "is not an octal mode");
    set_fails("daemon", "socket_mode", "rw", "is not an octal mode");

    set_ok("daemon", "io_threads", "1");
    set_ok("daemon", "io_threads", "256");
    set_fails("daemon", "io_threads", "0", "\"0\" is not an integer between 1 and 256");
    set_fails("daemon", "io_threads", "257", "between 1 and 256");
    set_fails("daemon", "io_threads", "-1", "between 1 and 256");
    set_fails("daemon", "io_threads", "4x", "between 1 and 256");
    set_fails("daemon", "io_threads", " 4", "between 1 and 256");
    set_fails("daemon", "io_threads", "99999999999999999999999", "between 1 and 256");
    set_fails("daemon", "max_clients", "65537", "between 1 and 65536");
    ck_assert_int_eq(cfg->io_threads, 256);

    set_ok("daemon", "log_level", "error");
    ck_assert_int_eq(cfg->log_level, LOG_ERROR);
    set_ok("daemon", "log_level", "WARN");
    ck_assert_int_eq(cfg->log_level, LOG_WARN);
    set_fails("daemon", "log_level", "verbose",
              "[daemon] log_level: \"verbose\" is not one of error|warn|info|debug");
    ck_assert_str_eq(config_log_level_name(LOG_DEBUG), "debug");
    ck_assert_str_eq(config_log_level_name((log_level)99), "?");

    set_ok("source", "attr_ttl", "0");
    ck_assert(cfg->attr_ttl == 0.0);
    set_ok("source", "attr_ttl", "2.25");
    ck_assert(cfg->attr_ttl == 2.25);
    set_ok("source", "attr_ttl", ".5");
    ck_assert(cfg->attr_ttl == 0.5);
    set_fails("source", "attr_ttl", "-1", "is not a number of seconds");
    set_fails("source", "attr_ttl", "nan", "is not a number of seconds");
    set_fails("source", "attr_ttl", "inf", "is not a number of seconds");
    set_fails("source", "attr_ttl", "0x10", "is not a number of seconds");
    set_fails("source", "attr_ttl", "1s", "is not a number of seconds");
    set_fails("source", "attr_ttl", "", "is not a number of seconds");
    set_fails("source", "attr_ttl", "1e300", "is not a number of seconds");

    set_fails("dram", "policy", "mru", "[dram] policy: \"mru\" is not one of lru|lfu|sieve|s3fifo|epoch|auto");
    set_fails("nvme", "policy", "", "is not one of lru");
    set_ok("nvme", "policy", "LRU");
    ck_assert_str_eq(cfg->nvme_policy, "lru");
    set_ok("dram", "policy", "Epoch");
    ck_assert_str_eq(cfg->dram_policy, "epoch");
    set_ok("nvme", "policy", "s3fifo");
    ck_assert_str_eq(cfg->nvme_policy, "s3fifo");

    set_ok("nvme", "path", "");
    ck_assert_str_eq(cfg->nvme_path, "");
    set_fails("daemon", "socket", "", "[daemon] socket: must not be empty");
    set_fails("daemon", "socket", "/tmp/a\tb", "contains a control character");
}
END_TEST

START_TEST(test_unknown)
{
    ck_assert_int_eq(config_set(cfg, "daemon", "foo", "1", err, sizeof(err)), -ENOENT);
    ck_assert_str_eq(err, "unknown key \"foo\" in [daemon]");
    ck_assert_int_eq(config_set(cfg, "bogus", "socket", "1", err, sizeof(err)), -ENOENT);
    ck_assert_str_eq(err, "unknown section [bogus]");
    /* A key that exists in another section is still unknown here. */
    ck_assert_int_eq(config_set(cfg, "source", "capacity", "1G", err, sizeof(err)), -ENOENT);
    parse_fails("[daemon]\nfoo = 1\n", "granary.conf:2: unknown key \"foo\" in [daemon]");
    parse_fails("[daemon]\nio_threads = 2\n\n[bogus]\nx = 1\n",
                "granary.conf:4: unknown section [bogus]");
    parse_fails("[Daemon]\n", "granary.conf:1: unknown section [Daemon]");
}
END_TEST

START_TEST(test_syntax_errors)
{
    parse_fails("# top\n\n\n\n\n\n\n\nsocket = /x\n", "granary.conf:9: key outside any section");
    parse_fails("[daemon]\nio_threads\n", "granary.conf:2: expected \"key = value\"");
    parse_fails("[daemon]\n\n\n= 4\n", "granary.conf:4: expected \"key = value\"");
    parse_fails("junk\n", "granary.conf:1: expected \"key = value\"");
    parse_fails("[daemon\n", "granary.conf:1: expected \"[section]\"");
    parse_fails("[daemon] x\n", "granary.conf:1: expected \"[section]\"");
    parse_fails("[daemon]\nsocket = \"/tmp/x\n", "granary.conf:2: unterminated quoted value");
    parse_fails("[daemon]\nsocket = \"/tmp/x\" y\n",
                "granary.conf:2: unexpected text after the closing quote");
    ck_assert_int_eq(config_parse(cfg, "[daemon]\n\0x", 11, "nul", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "nul:2: NUL byte in line");
}
END_TEST

/* The first error wins and later lines are not applied. */
START_TEST(test_first_error_wins)
{
    parse_fails("[daemon]\nio_threads = 8\n; fine\nmax_clients = 0\nfoo = 1\nlog_level = warn\n",
                "granary.conf:4: [daemon] max_clients: \"0\" is not an integer between 1 and 65536");
    ck_assert_int_eq(cfg->io_threads, 8);
    ck_assert_int_eq(cfg->max_clients, 1024);
    ck_assert_int_eq(cfg->log_level, LOG_INFO);
}
END_TEST

/* A key set twice is an error, also across two headers of one section and
 * with blanks in the brackets: a reader taking the first and one taking the
 * last made libgranary and granaryd use different sockets (issue 13). */
START_TEST(test_key_twice)
{
    parse_fails("[daemon]\nsocket = /run/a.sock\nsocket = /run/b.sock\n",
                "granary.conf:3: \"socket\" is set twice in [daemon]");
    parse_fails("[daemon]\nsocket = /run/a.sock\n[source]\nroots = /a\n[ daemon ]\nsocket = /b\n",
                "granary.conf:6: \"socket\" is set twice in [daemon]");
    ck_assert_int_eq(parse("[ daemon ]\nsocket = /run/c.sock\n"), 0);
    ck_assert_str_eq(cfg->socket, "/run/c.sock");
}
END_TEST

START_TEST(test_line_numbers)
{
    /* Error on line 7 counted across blank, comment, CRLF and section lines. */
    parse_fails("; c\r\n[source]\r\n\r\n  # indented comment\r\nroots = /a\r\n"
                "[source]\r\nchunk_size = 3M\r\n",
                "granary.conf:7: [source] chunk_size: \"3M\" is not a power of two between "
                "64K and 256M");
    parse_fails("[dram]\ncapacity = 1G\n[nvme]\n\n\n\n\n\n\n\n\n\nbad line\n",
                "granary.conf:13: expected \"key = value\"");
    /* Last line without newline. */
    parse_fails("[dram]\npolicy = mru",
                "granary.conf:2: [dram] policy: \"mru\" is not one of lru|lfu|sieve|s3fifo|epoch|auto");
}
END_TEST

START_TEST(test_comments)
{
    ck_assert_msg(parse("# full line\n"
                        "; also full line\n"
                        "   # indented\n"
                        "[daemon]   # after a section\n"
                        "io_threads = 8   # inline after blanks\n"
                        "max_clients = 10\t; inline after a tab\n"
                        "socket = /tmp/a#b;c\n"
                        "[nvme]\n"
                        "path = \"/tmp/x #y ;z\"   # quoted keeps ' #'\n"
                        "[ source ]\n"
                        "roots = /r\n") == 0, "%s", err);
    ck_assert_int_eq(cfg->io_threads, 8);
    ck_assert_int_eq(cfg->max_clients, 10);
    ck_assert_str_eq(cfg->socket, "/tmp/a#b;c");
    ck_assert_str_eq(cfg->nvme_path, "/tmp/x #y ;z");
    ck_assert_str_eq(cfg->roots[0], "/r");
    /* "key = # comment" is an empty value. */
    ck_assert_msg(parse("[nvme]\npath = # off\n") == 0, "%s", err);
    ck_assert_str_eq(cfg->nvme_path, "");
}
END_TEST

START_TEST(test_quotes)
{
    ck_assert_msg(parse("[daemon]\nsocket = \" /tmp/sp ace \"\n"
                        "[nvme]\npath = \"a\\\"b\\\\c\\d\"\n"
                        "policy = \"lru\"\n"
                        "[source]\nchunk_size = \"8M\";c\n") == 0, "%s", err);
    ck_assert_str_eq(cfg->socket, " /tmp/sp ace ");
    ck_assert_str_eq(cfg->nvme_path, "a\"b\\c\\d");
    ck_assert_uint_eq(cfg->chunk_size, 8 * MIB);
    ck_assert_msg(parse("[nvme]\npath = \"\"\n") == 0, "%s", err);
    ck_assert_str_eq(cfg->nvme_path, "");
    check_round_trip();
}
END_TEST

START_TEST(test_crlf_and_no_newline)
{
    ck_assert_msg(parse("[daemon]\r\nio_threads = 9\r\nsocket = /tmp/s\r\n[source]\r\n"
                        "roots = /x:/y\r\n") == 0, "%s", err);
    ck_assert_int_eq(cfg->io_threads, 9);
    ck_assert_str_eq(cfg->socket, "/tmp/s");
    ck_assert_str_eq(cfg->roots[1], "/y");
    ck_assert_msg(parse("[daemon]\nio_threads = 11") == 0, "%s", err);
    ck_assert_int_eq(cfg->io_threads, 11);
    ck_assert_msg(parse("[daemon]\r\nsocket = /tmp/t") == 0, "%s", err);
    ck_assert_str_eq(cfg->socket, "/tmp/t");
    ck_assert_msg(parse("\xef\xbb\xbf[daemon]\nio_threads = 3\n") == 0, "%s", err);
    ck_assert_int_eq(cfg->io_threads, 3);
}
END_TEST

START_TEST(test_long_lines)
{
    size_t n = 10000;
    char *text = malloc(n + 64), *msg;

    ck_assert_ptr_nonnull(text);
    /* A 10,000-byte comment line is fine. */
    strcpy(text, "[daemon]\n#");
    memset(text + strlen(text), 'c', n);
    strcpy(text + 10 + n, "\nio_threads = 5\n");
    ck_assert_msg(parse(text) == 0, "%s", err);
    ck_assert_int_eq(cfg->io_threads, 5);

    /* A 10,000-byte socket path is not (sun_path is 108 bytes). */
    strcpy(text, "\n[daemon]\nsocket = /");
    memset(text + strlen(text), 'a', n - 1);
    strcpy(text + 19 + n - 1, "\n");
    ck_assert_int_eq(parse(text), -EINVAL);
    ck_assert_msg(strncmp(err, "granary.conf:3: [daemon] socket: \"/aaa", 38) == 0, "%s", err);
    ck_assert_msg(strstr(err, "...\" is longer than 107 bytes") != NULL, "%s", err);
    ck_assert_str_eq(cfg->socket, "/run/granary/granary.sock");
    free(text);

    /* 107 bytes fits, 108 does not. */
    msg = malloc(200);
    memset(msg, 'b', 107);
    msg[0] = '/';
    msg[107] = '\0';
    set_ok("daemon", "socket", msg);
    ck_assert_uint_eq(strlen(cfg->socket), 107);
    strcat(msg, "b");
    set_fails("daemon", "socket", msg, "is longer than 107 bytes");
    free(msg);

    /* nvme path up to PATH_MAX - 1. */
    msg = malloc(PATH_MAX + 1);
    memset(msg, 'p', PATH_MAX);
    msg[0] = '/';
    msg[PATH_MAX - 1] = '\0';
    set_ok("nvme", "path", msg);
    msg[PATH_MAX - 1] = 'p';
    msg[PATH_MAX] = '\0';
    set_fails("nvme", "path", msg, "is longer than");
    free(msg);
    check_round_trip();
}
END_TEST

START_TEST(test_roots)
{
    char list[CONFIG_MAX_ROOTS * 8 + 16] = "";

    set_ok("source", "roots", "/a/:/b//c//:///:/d");
    ck_assert_int_eq(cfg->nroots, 4);
    ck_assert_str_eq(cfg->roots[0], "/a");
    ck_assert_str_eq(cfg->roots[1], "/b/c");
    ck_assert_str_eq(cfg->roots[2], "/");
    ck_assert_str_eq(cfg->roots[3], "/d");
    check_round_trip();

    set_fails("source", "roots", "/a:/x:/a//", "\"/a\" is listed twice");
    set_fails("source", "roots", "/:///", "\"/\" is listed twice");
    set_fails("source", "roots", "", "at least one root directory is needed");
    set_fails("source", "roots", "/a::/b", "empty path in the list");
    set_fails("source", "roots", "/a:", "empty path in the list");
    set_fails("source", "roots", ":/a", "empty path in the list");
    set_fails("source", "roots", "/a:rel/b", "[source] roots: \"rel/b\" is not an absolute path");
    set_fails("source", "roots", "./a", "is not an absolute path");
    /* The failed sets left the list alone. */
    ck_assert_int_eq(cfg->nroots, 4);
    ck_assert_str_eq(cfg->roots[3], "/d");

    for (int i = 0; i < CONFIG_MAX_ROOTS; i++)
        sprintf(list + strlen(list), "%s/r%d", i ? ":" : "", i);
    set_ok("source", "roots", list);
    ck_assert_int_eq(cfg->nroots, CONFIG_MAX_ROOTS);
    ck_assert_str_eq(cfg->roots[CONFIG_MAX_ROOTS - 1], "/r15");
    check_round_trip();
    strcat(list, ":/r16");
    set_fails("source", "roots", list, "more than 16 roots");
    ck_assert_int_eq(cfg->nroots, CONFIG_MAX_ROOTS);

    /* A shorter list clears the tail, so equal lists compare equal. */
    set_ok("source", "roots", "/mnt");
    config_defaults(cfg2);
    ck_assert_int_eq(memcmp(cfg, cfg2, sizeof(*cfg)), 0);
}
END_TEST

START_TEST(test_validate)
{
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);
    set_ok("source", "chunk_size", "256M");
    set_ok("dram", "capacity", "128M");
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "[dram] capacity (128M) is smaller than [source] chunk_size (256M)");
    set_ok("dram", "capacity", "256M");
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);

    set_ok("nvme", "capacity", "15M");
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "[nvme] capacity (15M) is below 16M") != NULL, "%s", err);
    set_ok("nvme", "path", "");
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);
    set_ok("nvme", "capacity", "0");
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);
    set_ok("nvme", "path", "/n");
    set_ok("nvme", "capacity", "16M");
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);

    cfg->nroots = 0;
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "at least one root") != NULL, "%s", err);
}
END_TEST

START_TEST(test_round_trip_defaults)
{
    char *text = dump(cfg);

    ck_assert_msg(strstr(text, "[daemon]\n") && strstr(text, "chunk_size = 4M\n") &&
                  strstr(text, "socket_mode = 0660\n") && strstr(text, "attr_ttl = 1\n"),
                  "%s", text);
    free(text);
    check_round_trip();
}
END_TEST

START_TEST(test_round_trip_odd_values)
{
    set_ok("source", "attr_ttl", "0.1");
    set_ok("nvme", "capacity", "12345");
    set_ok("dram", "capacity", "1025K");
    set_ok("daemon", "socket", "/tmp/a\"b #c;d\\e");
    set_ok("nvme", "path", "");
    set_ok("daemon", "log_level", "warn");
    set_ok("daemon", "socket_mode", "0");
    check_round_trip();
    ck_assert(cfg2->attr_ttl == 0.1);
    ck_assert_str_eq(cfg2->socket, "/tmp/a\"b #c;d\\e");

    set_ok("source", "attr_ttl", "123456.789");
    set_ok("nvme", "capacity", "18446744073709551615");
    set_ok("nvme", "path", " lead and trail ");
    check_round_trip();
    set_ok("nvme", "path", "\"starts with a quote");
    check_round_trip();
}
END_TEST

START_TEST(test_describe)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    static const char *const want[] = {
        "daemon.socket ", "daemon.socket_mode ", "daemon.io_threads ", "daemon.log_level ",
        "daemon.max_clients ", "source.roots ", "source.chunk_size ", "source.attr_ttl ",
        "dram.capacity ", "dram.policy ", "nvme.path ", "nvme.capacity ", "nvme.policy ",
        "nvme.inline_max ", "metrics.listen ", "source.max_inflight ",
        "prefetch.readahead_max ", "prefetch.hint_window ", "prefetch.hint_max_entries ",
        "127.0.0.1:9464",
        "/run/granary/granary.sock", "error|warn|info|debug",
        "size 2^n 64K..256M", "int 1..256", "enum lru", "DESCRIPTION",
    };
    int lines = 0;

    ck_assert_ptr_nonnull(f);
    config_describe(f);
    ck_assert_int_eq(fclose(f), 0);
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        ck_assert_msg(strstr(buf, want[i]) != NULL, "\"%s\" missing in\n%s", want[i], buf);
    for (char *p = buf; *p; p++)
        lines += *p == '\n';
    ck_assert_int_eq(lines, 1 + (int)config_nkeys());   /* a heading, then one line per key */
    free(buf);
}
END_TEST

START_TEST(test_load)
{
    char *dir = tu_mkdtemp(), *path, *big;
    FILE *f;
    int rc;

    /* Missing file. */
    ck_assert_int_eq(asprintf(&path, "%s/none.conf", dir) > 0, 1);
    rc = config_load(cfg, path, err, sizeof(err));
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_msg(strstr(err, "none.conf: No such file or directory") != NULL, "%s", err);

    /* A directory. */
    ck_assert_int_lt(config_load(cfg, dir, err, sizeof(err)), 0);

    /* A good file, and errors name the path. */
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("[daemon]\nio_threads = 12\n[dram]\ncapacity = 1K\n", f);
    fclose(f);
    rc = config_load(cfg, path, err, sizeof(err));
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "none.conf:4: [dram] capacity: \"1K\" is below the minimum 1M"),
                  "%s", err);
    ck_assert_int_eq(cfg->io_threads, 12);

    /* A comment-only file just under 1 MiB loads; over 1 MiB is refused. */
    big = malloc(2 * MIB);
    memset(big, '#', 2 * MIB);
    for (size_t i = 100; i < 2 * MIB; i += 100)
        big[i] = '\n';
    f = fopen(path, "w");
    fwrite(big, 1, MIB, f);
    fclose(f);
    ck_assert_msg(config_load(cfg, path, err, sizeof(err)) == 0, "%s", err);
    f = fopen(path, "w");
    fwrite(big, 1, MIB + 1, f);
    fclose(f);
    ck_assert_int_eq(config_load(cfg, path, err, sizeof(err)), -EFBIG);
    ck_assert_msg(strstr(err, "larger than") != NULL, "%s", err);
    f = fopen(path, "w");
    fwrite(big, 1, 2 * MIB, f);
    fclose(f);
    ck_assert_int_eq(config_load(cfg, path, err, sizeof(err)), -EFBIG);

    free(big);
    free(path);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* The shipped config sets every key, to its default: loaded over a config
 * where every key differs from its default, it gives the defaults. */
START_TEST(test_shipped_config)
{
    static const char *const other[][3] = {
        { "daemon", "socket", "/tmp/other.sock" }, { "daemon", "socket_mode", "0600" },
        { "daemon", "io_threads", "77" }, { "daemon", "log_level", "debug" },
        { "daemon", "max_clients", "3" }, { "source", "roots", "/x:/y" },
        { "source", "chunk_size", "64K" }, { "source", "attr_ttl", "9.5" },
        { "dram", "capacity", "3G" }, { "dram", "policy", "lru" },
        { "nvme", "path", "" }, { "nvme", "capacity", "1T" },
        { "nvme", "policy", "lru" }, { "nvme", "inline_max", "1K" },
    };
    int rc;

    for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
        set_ok(other[i][0], other[i][1], other[i][2]);
    rc = config_load(cfg, "config/granary.conf", err, sizeof(err));
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(config_validate(cfg, err, sizeof(err)), 0);
    ck_assert_msg(memcmp(cfg, cfg2, sizeof(*cfg)) == 0, "shipped config differs from defaults");
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_every_key);
    tcase_add_test(tc, test_empty_text);
    tcase_add_test(tc, test_sizes);
    tcase_add_test(tc, test_size_keys);
    tcase_add_test(tc, test_other_types);
    tcase_add_test(tc, test_unknown);
    tcase_add_test(tc, test_syntax_errors);
    tcase_add_test(tc, test_first_error_wins);
    tcase_add_test(tc, test_key_twice);
    tcase_add_test(tc, test_line_numbers);
    tcase_add_test(tc, test_comments);
    tcase_add_test(tc, test_quotes);
    tcase_add_test(tc, test_crlf_and_no_newline);
    tcase_add_test(tc, test_long_lines);
    tcase_add_test(tc, test_roots);
    tcase_add_test(tc, test_validate);
    tcase_add_test(tc, test_round_trip_defaults);
    tcase_add_test(tc, test_round_trip_odd_values);
    tcase_add_test(tc, test_describe);
    tcase_add_test(tc, test_load);
    tcase_add_test(tc, test_shipped_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    int failed;

    srunner_run_all(sr, CK_NORMAL);
    failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
