#!/usr/bin/env python3
"""bench/report.py - the DFS benchmark report: reads OUT/results.jsonl
(written by bench/dfs.sh) and OUT/sim-curve.json (the policy simulator, from
bench/run.sh), writes OUT/dfs.md (one table per scenario, every alternative
beside Granary with Granary's ratio to it) and the plots OUT/readers.png,
OUT/hit_ratio.png and OUT/stall.png with gnuplot.

    bench/report.py OUT
"""
import json
import os
import platform
import subprocess
import sys

OUT = sys.argv[1]
rows = [json.loads(l) for l in open(os.path.join(OUT, "results.jsonl")) if l.strip()]
setup = next((r for r in rows if r.get("scenario") == "setup"), {})
skipped = next((r for r in rows if r.get("scenario") == "skipped"), None)
md = []


def p(*a):
    md.append(" ".join(str(x) for x in a))


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def mb(x):
    return "%.1f" % (x / 1e6)


def ratio(a, b):
    if not a or not b:
        return "-"
    return "**%.2fx**" % (a / b)


def gr_delta(r, name):
    """A granaryd counter's change over a run, or None when absent."""
    a, b = r.get("gr_before") or {}, r.get("gr_after") or {}
    if name not in b:
        return None
    return b[name] - a.get(name, 0)


def byte_hit(r):
    """1 - bytes from the DFS / bytes read: the same measure for every system;
    for Granary the bytes it read from the source if more (its misses: the
    DFS client may serve some of them from a cache of its own, since granaryd
    keeps source files open, and that cache is outside Granary's limits)."""
    if not r.get("bytes"):
        return 0.0
    miss = r["dfs_bytes"]
    b, a = r.get("gr_before") or {}, r.get("gr_after") or {}
    if "source_bytes_read" in a:
        miss = max(miss, a["source_bytes_read"] - b.get("source_bytes_read", 0))
    return max(0.0, 1.0 - miss / r["bytes"])


def find(scen, system, phase=None, **kw):
    for r in rows:
        if r.get("scenario") == scen and r.get("system") == system and (
                phase is None or r.get("phase") == phase) and all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def machine():
    cpu = sh("sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1")
    mem = sh("free -g | awk '/Mem:/ {print $2}'")
    disk = sh("findmnt -n -o SOURCE,FSTYPE --target build | head -1")
    dev = sh("lsblk -d -n -o NAME,SIZE,ROTA,MODEL $(findmnt -n -o SOURCE --target build | "
             "sed 's|p\\?[0-9]*$||') 2>/dev/null")
    return ("%s cores (%s), %s GiB RAM, local disk %s (%s), Linux %s, %s." %
            (os.cpu_count(), cpu, mem, disk, dev or "?", platform.release(),
             sh(". /etc/os-release; echo $PRETTY_NAME")))


p("# Granary on a real DFS, beside what users would pick instead")
p()
p("Run of", sh("date -u +%Y-%m-%dT%H:%MZ"), "- mode", setup.get("mode", "?"), "- Granary",
  sh("git rev-parse --short HEAD") + ("" if sh("git status --porcelain -- daemon client proto") == "" else "+changes"))
p()
p("Machine:", machine())
if skipped:
    p()
    p("**No DFS benchmarks in this run:**", skipped["why"])
    open(os.path.join(OUT, "dfs.md"), "w").write("\n".join(md) + "\n")
    sys.exit(0)
p()
p("DFS: MooseFS %s (master + 2 chunkservers in network namespaces, `scripts/dfs.sh`), "
  "capped with TBF at %s, mounted with `mfscachemode=DIRECT` for the direct, memcached, Redis and "
  "Granary reads and with the default cache mode for the page-cache rows. Chunk size %s for "
  "Granary, memcached and Redis (read-through: GET, on a miss pread from the DFS and SET). "
  "Datasets: %s; %s; %s. %s, Redis %s, all on Unix sockets. Every reader: `build/bench/dfsbench`, "
  "%s processes unless the table says otherwise. Shared-memory huge pages (`shmem_enabled`): %s "
  "(granaryd's `[dram] huge_pages = auto` uses them where this allows advised mappings)." %
  (setup.get("moosefs", "?"), setup.get("rate"), setup.get("chunk"), setup.get("large"),
   setup.get("samples"), setup.get("shards"), setup.get("memcached"), setup.get("redis"),
   setup.get("procs"), setup.get("shmem_thp", "not recorded")))
p()
p("How to read: **cold** = first pass, every cache empty and the page cache dropped; **warm** = the "
  "same reads again. **Staging, first pass** counts the copy to local disk plus the first read. "
  "**DFS MB** = bytes the DFS side sent over its (shaped) link during the run, measured on the "
  "veth, whoever asked. The two ratio columns are Granary's throughput (cold, then warm) divided "
  "by the row's: above 1 Granary is faster. Latency is per operation (a whole file, or one range).")


def throughput_table(scen, title, what, more=()):
    p()
    p("## %s" % title)
    p()
    p(what)
    p()
    gc, gw = find(scen, "granary", "cold"), find(scen, "granary", "warm")
    p("| system | pass | MB/s | p50 us | p99 us | DFS MB | Granary cold / this | Granary warm / this |")
    p("|---|---|---|---|---|---|---|---|")

    def line(name, pas, mbps, p50, p99, dfs):
        p("| %s | %s | %.1f | %s | %s | %s | %s | %s |" % (
            name, pas, mbps, p50, p99, dfs, ratio(gc and gc["MBps"], mbps), ratio(gw and gw["MBps"], mbps)))

    for sysname, label in (("dfs", "DFS mount, direct"), ("staging", "staging to local disk"),
                           ("page cache", "page cache (DFS mount)"), ("memcached", "memcached"),
                           ("redis", "Redis"), ("granary", "Granary")) + tuple(more):
        if sysname == "dfs":
            r = find(scen, "dfs", "cold")
            if r:
                line(label, "every pass", r["MBps"], "%.0f" % r["p50_us"], "%.0f" % r["p99_us"], mb(r["dfs_bytes"]))
            continue
        if sysname == "staging":
            c, r = find(scen, "staging", "copy"), find(scen, "staging", "read")
            if c and r:
                total = c["seconds"] + r["seconds"]
                line(label, "first pass: copy %.2f s + read" % c["seconds"], r["bytes"] / total / 1e6,
                     "-", "-", mb(c["dfs_bytes"] + r["dfs_bytes"]))
                line(label, "later passes", r["MBps"], "%.0f" % r["p50_us"], "%.0f" % r["p99_us"], mb(r["dfs_bytes"]))
            continue
        for ph in ("cold", "warm"):
            r = find(scen, sysname, ph)
            if r:
                line(label, ph, r["MBps"], "%.0f" % r["p50_us"], "%.0f" % r["p99_us"], mb(r["dfs_bytes"]))


throughput_table("large", "1. Large files read sequentially",
                 "Each file read whole in 4 MiB reads (%s)." % setup.get("large"))
throughput_table("samples", "2. 100 KB sample files",
                 "Each sample opened, read whole, closed (%s)." % setup.get("samples"))
if find("user", "granary", "cold"):
    throughput_table("user", "2b. 100 KB sample files as a user, shuffled",
                     "The samples of table 2 read as uid 65534 (so each OPEN carries the reader's own "
                     "read descriptor: access_check = fd, the default) in a shuffled order, which no "
                     "read-ahead across files can guess: the cold pass of a data loader's first epoch. "
                     "A warm open still costs the reader's own open of the file on the DFS (its proof). "
                     "Granary dataset: the directory registered (`granaryctl dataset add`, "
                     "access_check = judge), so that opens are answered from its manifest.",
                     more=(("granary dataset", "Granary, dataset registered"),))
throughput_table("random", "3. Random 64 KiB ranges of the large files",
                 "64 KiB at random aligned offsets of random files, handles kept open; warm repeats the "
                 "same ranges. memcached, Redis and Granary fetch whole chunks on a miss, so their cold "
                 "DFS bytes show the read amplification of a chunk cache.")

# ---- readers ----
p()
p("## 4. Reader processes (the 100 KB samples, warm)")
p()
p("MB/s with N processes reading their share of the samples (shuffled), every cache filled "
  "beforehand; the DFS row is the direct mount (no cache).")
p()
readers = sorted({r["procs"] for r in rows if r.get("scenario") == "readers" and "procs" in r and r.get("phase") == "warm"})
systems = ["dfs", "staging", "page cache", "memcached", "redis", "granary"]
p("| readers | " + " | ".join(systems) + " | Granary / DFS | Granary / page cache | Granary / memcached | Granary / Redis |")
p("|---" * (len(systems) + 5) + "|")
dat = []
for n in readers:
    v = {s: (find("readers", s, "warm", procs=n) or {}).get("MBps") for s in systems}
    dat.append((n, v))
    g = v["granary"]
    p("| %d | " % n + " | ".join("%.0f" % v[s] if v[s] else "-" for s in systems) + " | " +
      " | ".join(ratio(g, v[s]) for s in ("dfs", "page cache", "memcached", "redis")) + " |")
with open(os.path.join(OUT, "readers.dat"), "w") as f:
    f.write("# readers " + " ".join(s.replace(" ", "_") for s in systems) + "\n")
    for n, v in dat:
        f.write("%d %s\n" % (n, " ".join("%.1f" % (v[s] or 0) for s in systems)))

# ---- epochs ----
p()
p("## 5. Shuffled epochs at cache sizes of 0.5x, 1.1x and 2x the dataset")
p()
shards = setup.get("shards")
p("The 1 MiB files (%s) read in a fresh random order each epoch. memcached `-m` and Redis "
  "`maxmemory` (allkeys-lru) are the cache size; Granary gets an NVMe tier of that size and a "
  "DRAM tier of a quarter of it (every chunk is written behind to NVMe, so the NVMe capacity "
  "bounds what it holds). Hit ratio = 1 - DFS bytes / bytes read (for Granary, its own source "
  "reads if more: MooseFS's client serves some re-reads of files granaryd keeps open from a cache "
  "of its own, outside Granary's capacity, so the DFS MB column can be below Granary's misses), "
  "averaged over the epochs after "
  "the first; the best possible with a cache of C for a dataset D > C is C/D. The page cache has no "
  "such limit here (the machine's RAM). Throughput is of the epochs after the first." % shards)
p()
p("| cache / dataset | system | hit ratio | MB/s | DFS MB per epoch | Granary (best policy) / this |")
p("|---|---|---|---|---|---|")
esys = sorted({r["system"] for r in rows if r.get("scenario") == "epochs" and r["system"] != "dfs"},
              key=lambda s: (not s.startswith("granary"), s))
measured = {}
d0 = find("epochs", "dfs", "epoch 1")
for x in sorted({r["cache_x"] for r in rows if r.get("scenario") == "epochs" and r.get("cache_x")}):
    stats = {}
    for s in esys:
        es = [r for r in rows if r.get("scenario") == "epochs" and r["system"] == s and r.get("cache_x") == x
              and r.get("epoch", 1) > 1]
        if not es:
            continue
        hr = sum(byte_hit(r) for r in es) / len(es)
        secs = sum(r["seconds"] for r in es)
        stats[s] = (hr, sum(r["bytes"] for r in es) / secs / 1e6, sum(r["dfs_bytes"] for r in es) / len(es))
        measured.setdefault(s, []).append((x, hr))
    best = max((v[1] for s, v in stats.items() if s.startswith("granary")), default=None)
    for s, (hr, mbps, dfsb) in stats.items():
        p("| %sx | %s | %.2f | %.0f | %s | %s |" % (x, s, hr, mbps, mb(dfsb), ratio(best, mbps)))
if d0:
    p("| - | DFS mount, direct (no cache) | 0.00 | %.0f | %s | - |" % (d0["MBps"], mb(d0["dfs_bytes"])))

# Simulator curve + measured points for the hit-ratio plot.
curve = os.path.join(OUT, "sim-curve.json")
if os.path.exists(curve):
    sim = json.load(open(curve))
    pols = []
    for r in sim["results"]:
        if r["policy"] not in pols:
            pols.append(r["policy"])
    with open(os.path.join(OUT, "hit_ratio_sim.dat"), "w") as f:
        f.write("# cache/dataset " + " ".join(pols) + "\n")
        sizes = sorted({r["dataset_over_cache"] for r in sim["results"]}, reverse=True)
        for d in sizes:
            hr = {r["policy"]: r["hit_ratio"] for r in sim["results"] if r["dataset_over_cache"] == d}
            f.write("%.4f %s\n" % (1.0 / d, " ".join("%.4f" % hr[q] for q in pols)))
    with open(os.path.join(OUT, "hit_ratio_measured.dat"), "w") as f:
        for s, pts in measured.items():
            f.write("# %s\n" % s)
            for x, hr in pts:
                f.write("%s %.4f\n" % (x, hr))
            f.write("\n\n")
    measured_names = list(measured)
else:
    pols, measured_names = [], []

# ---- train ----
p()
p("## 6. Training loop: stall fraction per epoch")
p()
p("%s processes consume the 100 KB samples in a fresh shuffled order each epoch and \"compute\" "
  "%s us per sample (a sleep: GPU time, when a prefetcher can work). Stall fraction = time waiting "
  "for data / epoch time (0 = the loader never held the GPU up). Epoch 1 is cold (caches empty, "
  "page cache dropped); later epochs are warm. The DFS's own chunkservers keep a page cache on "
  "their side, so the direct DFS gets faster after epoch 1 too. Granary + hints tells the daemon "
  "each process's order (`gr_hint_append`) before the epoch." % (setup.get("procs"), setup.get("compute_us")))
p()
tsys = []
for r in rows:
    if r.get("scenario") == "train" and r["system"] not in tsys:
        tsys.append(r["system"])
extra = [c for c in ("prefetch_issued", "prefetch_used", "prefetch_wasted", "stall_microseconds")
         if any(gr_delta(r, c) is not None for r in rows if r.get("scenario") == "train")]
p("| system | epoch | epoch s | stall fraction | MB/s | DFS MB | hints | " +
  " | ".join(extra) + (" | " if extra else "") + "epoch time / Granary + hints |")
p("|---" * (8 + len(extra)) + "|")
epochs = sorted({r["epoch"] for r in rows if r.get("scenario") == "train"})
with open(os.path.join(OUT, "stall.dat"), "w") as f:
    f.write("# epoch " + " ".join(s.replace(" ", "_") for s in tsys) + "\n")
    for e in epochs:
        f.write("%d %s\n" % (e, " ".join("%.4f" % (find("train", s, epoch=e) or {}).get("stall_frac", 0) for s in tsys)))
for s in tsys:
    for e in epochs:
        r = find("train", s, epoch=e)
        gh = find("train", "granary + hints", epoch=e)
        if not r:
            continue
        h = r.get("hints", "-")
        if h == "failed":
            h = "failed (%s)" % r.get("hints_error", "?")
        ex = ["%d" % gr_delta(r, c) if gr_delta(r, c) is not None else "-" for c in extra]
        p("| %s | %d | %.2f | %.3f | %.0f | %s | %s | %s%s |" % (
            s, e, r["epoch_s"], r["stall_frac"], r["MBps"], mb(r["dfs_bytes"]), h,
            " | ".join(ex) + (" | " if ex else ""), ratio(r["epoch_s"], gh and gh["epoch_s"])))

# ---- plots ----
plots = []


def gnuplot(name, script):
    path = os.path.join(OUT, name)
    full = "set terminal pngcairo size 800,500 font ',10'\nset output '%s'\nset key outside right\nset grid\n%s\n" % (path, script)
    try:
        r = subprocess.run(["gnuplot"], input=full, text=True, capture_output=True)
        if r.returncode == 0:
            plots.append(name)
        else:
            sys.stderr.write("report: gnuplot %s: %s\n" % (name, r.stderr))
    except OSError as e:
        sys.stderr.write("report: no gnuplot: %s\n" % e)


dq = lambda f: "'%s'" % os.path.join(OUT, f)
if dat:
    gnuplot("readers.png",
            "set title 'Warm reads of 100 KB samples vs reader processes'\n"
            "set xlabel 'reader processes'\nset ylabel 'MB/s'\nset logscale x 2\nset yrange [0:*]\n"
            "plot " + ", ".join("%s using 1:%d with linespoints lw 2 title '%s'" % (dq("readers.dat"), i + 2, s)
                                for i, s in enumerate(systems)))
if pols:
    lines = ["%s using 1:%d with lines lw 2 title 'sim %s'" % (dq("hit_ratio_sim.dat"), i + 2, q)
             for i, q in enumerate(pols)]
    lines += ["%s index %d using 1:2 with points pt %d ps 2 title 'measured: %s'" % (
        dq("hit_ratio_measured.dat"), i, 5 + i, s) for i, s in enumerate(measured_names)]
    gnuplot("hit_ratio.png",
            "set title 'Shuffled epochs: hit ratio after the first epoch vs cache size'\n"
            "set xlabel 'cache size / dataset'\nset ylabel 'hit ratio'\nset yrange [0:1.05]\n"
            "plot " + ", ".join(lines))
if epochs:
    gnuplot("stall.png",
            "set title 'Training loop: stall fraction per epoch'\nset xlabel 'epoch'\n"
            "set ylabel 'stall fraction (waiting / epoch time)'\nset yrange [0:1]\nset xtics 1\n"
            "plot " + ", ".join("%s using 1:%d with linespoints lw 2 title '%s'" % (dq("stall.dat"), i + 2, s)
                                for i, s in enumerate(tsys)))
p()
p("## Plots")
p()
for name, what in (("readers.png", "throughput vs reader processes"),
                   ("hit_ratio.png", "hit ratio vs cache size: simulated policies (lines), measured systems (points)"),
                   ("stall.png", "stall fraction per epoch")):
    if name in plots:
        p("- [%s](%s): %s" % (name, name, what))
p()
p("Raw: results.jsonl beside this file (one line per measurement, with granaryd's counters before "
  "and after). Command: `make bench` (BENCH_MODE=%s)." % setup.get("mode", "quick"))
open(os.path.join(OUT, "dfs.md"), "w").write("\n".join(md) + "\n")
