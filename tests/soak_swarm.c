/*
 * soak_swarm.c - many clients at once for the soak test (scripts/soak.sh).
 *
 *   soak_swarm -t THREADS [-S SLOW] -s SECONDS SOCKET FILE...
 *
 * THREADS threads, each with its own connection, read random ranges of up
 * to 64 KiB of random files with gr_pread and compare them with the source
 * (a wrong byte makes the exit status 1).  SLOW more connections say HELLO,
 * open a file, pipeline READ requests of 128 KiB and never read a reply (the
 * daemon must stop reading them, not buffer without bound).  Prints
 * "swarm: reads=N bytes=N errors=N wrong=N slow=N".
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "granary.h"
#include "proto.h"

static const char *sock;
static char **files;
static int nfiles;
static double end_at;
static atomic_ullong n_reads, n_bytes, n_errors, n_wrong;

static double now_s(void)
{
    return gr__now_s();
}

static void *reader(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    uint8_t *buf = malloc(65536), *want = malloc(65536);
    gr_client *c = NULL;

    while (now_s() < end_at) {
        const char *p = files[rand_r(&seed) % (unsigned)nfiles];
        int fd = open(p, O_RDONLY | O_CLOEXEC);
        struct stat st;
        gr_file *f;
        if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0)
            exit(2);
        if (!c && !(c = gr_connect(sock))) {
            n_errors++;
            close(fd);
            usleep(50000);
            continue;
        }
        if ((f = gr_open(c, p))) {
            for (int i = 0; i < 8; i++) {
                off_t off = (off_t)((uint64_t)rand_r(&seed) * 4099 % (uint64_t)st.st_size);
                size_t len = 1 + (size_t)rand_r(&seed) % 65536;
                ssize_t n = gr_pread(f, buf, len, off);
                n_reads++;
                if (n < 0) {
                    n_errors++;
                    continue;
                }
                if (pread(fd, want, (size_t)n, off) != n || memcmp(buf, want, (size_t)n)) {
                    fprintf(stderr, "WRONG BYTES %s off %lld\n", p, (long long)off);
                    n_wrong++;
                }
                n_bytes += (uint64_t)n;
            }
            gr_close(f);
        } else {
            n_errors++;
        }
        close(fd);
    }
    gr_disconnect(c);
    free(buf);
    free(want);
    return NULL;
}

/* A client that asks and never listens.  Returns the fd (kept open). */
static int slow_client(void)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    uint8_t req[PROTO_HDR_LEN + PROTO_MAX_PATH];
    proto_hello h = { .version = PROTO_VERSION, .max_msg = PROTO_MAX_MSG };
    proto_read r = { .handle = 1, .len = 128 * 1024, .off = 0 };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ssize_t n;

    snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
        return -1;
    n = proto_enc_hello(req, sizeof(req), 0, 1, &h);
    send(fd, req, (size_t)n, MSG_NOSIGNAL);
    n = proto_enc_open(req, sizeof(req), 2, files[0], strlen(files[0]));
    send(fd, req, (size_t)n, MSG_NOSIGNAL);
    for (uint32_t i = 0; i < 2000; i++) {
        r.off = (uint64_t)i * r.len % (4u << 20);
        n = proto_enc_read(req, sizeof(req), 3 + i, &r);
        if (send(fd, req, (size_t)n, MSG_NOSIGNAL) < 0)
            break;                      /* the daemon stopped reading us: good */
    }
    return fd;
}

int main(int argc, char **argv)
{
    int nthreads = 50, nslow = 0, opt, *slow;
    double secs = 10;
    pthread_t *t;

    while ((opt = getopt(argc, argv, "t:S:s:")) != -1) {
        switch (opt) {
        case 't': nthreads = atoi(optarg); break;
        case 'S': nslow = atoi(optarg); break;
        case 's': secs = atof(optarg); break;
        default: goto usage;
        }
    }
    if (argc - optind < 2 || nthreads < 0 || nslow < 0)
        goto usage;
    sock = argv[optind];
    files = argv + optind + 1;
    nfiles = argc - optind - 1;
    end_at = now_s() + secs;
    slow = calloc((size_t)nslow + 1, sizeof(int));
    t = calloc((size_t)nthreads + 1, sizeof(*t));
    for (int i = 0; i < nslow; i++)
        slow[i] = slow_client();
    for (int i = 0; i < nthreads; i++)
        pthread_create(&t[i], NULL, reader, (void *)(uintptr_t)(i * 7919 + getpid()));
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    for (int i = 0; i < nslow; i++)
        if (slow[i] >= 0)
            close(slow[i]);
    printf("swarm: reads=%llu bytes=%llu errors=%llu wrong=%llu slow=%d\n",
           (unsigned long long)n_reads, (unsigned long long)n_bytes,
           (unsigned long long)n_errors, (unsigned long long)n_wrong, nslow);
    free(slow);
    free(t);
    return n_wrong ? 1 : 0;
usage:
    fprintf(stderr, "usage: soak_swarm -t THREADS [-S SLOW] -s SECONDS SOCKET FILE...\n");
    return 2;
}
