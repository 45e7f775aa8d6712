// gdnrt.h: the runtime of the CPU executor of Metal kernels.
//
// Each threadgroup runs with one OS thread per GPU thread. Only one of a
// threadgroup's threads runs at a time: it holds the baton until it reaches a
// synchronisation point (threadgroup_barrier, simdgroup_barrier or a simd_*
// collective) or returns, and then hands the baton to the next ready thread
// chosen by the schedule policy. Between two synchronisation points the
// threads of a group therefore run one after the other, in an order the
// policy fixes (ascending thread index, descending, or seeded random). A
// kernel whose result depends on that order has a missing barrier or a race:
// running it under several policies and comparing the results bit for bit
// finds it. A barrier that not every thread reaches, or simdgroup lanes that
// call different collectives, leave no ready thread: the runtime reports the
// deadlock (which threads wait where) instead of hanging.
//
// Several threadgroups run at once on separate slots (each slot owns its own
// pool of OS threads and its own threadgroup memory), as on a GPU.
//
// This header is included by the MSL prelude (metal_stdlib) before any MSL
// macro is defined, so it may use every standard name.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <pthread.h>

namespace gdnrt {

enum : int { policy_ascending = 0, policy_descending = 1, policy_random = 2 };

// Thread states within a group.
enum class st : uint8_t { idle, ready, running, tg_wait, sg_wait, done };

// A collective: combines the in values of n lanes into their out values.
using collective_fn = void (*)(const void* const* in, void* const* out, const uint32_t* param, int n);

struct aborted {};  // thrown inside a GPU thread to unwind it after a deadlock

struct group;

// One OS thread of a slot's pool; it runs one GPU thread at a time.
struct lane {
    pthread_t th{};
    std::atomic<uint32_t> go{0};
    group* g = nullptr;
    int tid = 0;
    bool quit = false;
};

inline thread_local lane* cur = nullptr;

inline void give(lane* l) {
    l->go.store(1, std::memory_order_release);
    l->go.notify_one();
}

inline void wait_baton(lane* l) {
    while (l->go.exchange(0, std::memory_order_acquire) == 0) {
        l->go.wait(0, std::memory_order_acquire);
    }
}

// The builtins of one GPU thread, as the kernel's last five parameters take
// them: tgpig, tpitg, ntg, tiisg, sgitg.
struct builtins {
    uint32_t tgpig[3];
    uint32_t tpitg[3];
    uint32_t ntg[3];
    uint32_t tiisg;
    uint32_t sgitg;
};

struct call {
    const void* args;
    void* const* bufs;
    int nbufs;
    void* shmem;
};

using invoke_fn = void (*)(const call&, const builtins&);

struct entry {
    const char* name;
    invoke_fn fn;
    size_t args_size;  // sizeof the kernel's args struct
    int nbufs;         // device buffers after the args
};

// The state of one threadgroup being run on a slot.
struct group {
    int n = 0;           // threads
    int nsimd = 0;       // simdgroups
    lane** lanes = nullptr;
    const entry* e = nullptr;
    call c{};
    uint32_t tgpig[3]{};
    uint32_t ntg[3]{};
    int policy = 0;
    uint64_t rng = 0;

    std::vector<st> state;
    std::vector<int> ready;  // FIFO for ascending/descending, a set for random
    size_t head = 0;
    int tg_arrived = 0;
    int done = 0;
    std::vector<int> sg_arrived;
    std::vector<const void*> cin;
    std::vector<void*> cout;
    std::vector<uint32_t> cparam;
    std::vector<collective_fn> cfn;

    bool abort = false;
    std::string err;
    std::atomic<int> finished{0};
    std::atomic<uint32_t> all_done{0};

    uint64_t next_rand() {
        // splitmix64
        uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }

    // push makes threads [lo, hi) ready, in the policy's order.
    void push(int lo, int hi) {
        if (policy == policy_descending) {
            for (int t = hi - 1; t >= lo; --t) push1(t);
        } else {
            for (int t = lo; t < hi; ++t) push1(t);
        }
    }
    void push1(int t) {
        state[t] = st::ready;
        ready.push_back(t);
    }

    // pick returns the next thread to run, or -1 when none is ready.
    int pick() {
        if (head >= ready.size()) {
            ready.clear();
            head = 0;
            return -1;
        }
        int t;
        if (policy == policy_random) {
            size_t k = head + next_rand() % (ready.size() - head);
            t = ready[k];
            ready[k] = ready[head];
        } else {
            t = ready[head];
        }
        ++head;
        if (head == ready.size()) {
            ready.clear();
            head = 0;
        }
        state[t] = st::running;
        return t;
    }

    std::string describe() const {
        int ntg = 0, nsg = 0, nd = 0, nr = 0;
        std::string sgs;
        for (int t = 0; t < n; ++t) {
            switch (state[t]) {
            case st::tg_wait: ++ntg; break;
            case st::sg_wait: ++nsg; break;
            case st::done: ++nd; break;
            default: ++nr; break;
            }
        }
        for (int s = 0; s < nsimd; ++s) {
            if (sg_arrived[s] > 0) {
                sgs += " simdgroup " + std::to_string(s) + ": " + std::to_string(sg_arrived[s]) + " lanes in a simd collective;";
            }
        }
        return "threadgroup (" + std::to_string(tgpig[0]) + "," + std::to_string(tgpig[1]) + "," +
               std::to_string(tgpig[2]) + ") of kernel " + e->name + ": " + std::to_string(ntg) +
               " threads wait at threadgroup_barrier, " + std::to_string(nsg) + " in simd collectives, " +
               std::to_string(nd) + " returned, " + std::to_string(nr) + " other;" + sgs;
    }

    // wake_all hands the baton to every thread but self that has not
    // returned, after abort was set: each of them unwinds (or, not started
    // yet, never starts).
    void wake_all(int self) {
        for (int t = 0; t < n; ++t) {
            if (t != self && state[t] != st::done) {
                state[t] = st::idle;
                give(lanes[t]);
            }
        }
    }

    // deadlock: no thread is ready but some wait. Wake every waiter so that
    // it unwinds, then unwind the caller.
    [[noreturn]] void deadlock(int self, const char* what) {
        if (!abort) {
            abort = true;
            err = std::string("deadlock (") + what + "): " + describe();
        }
        wake_all(self);
        throw aborted{};
    }

    // yield hands the baton on after the caller blocked; it returns when the
    // caller holds the baton again.
    void yield(int self, const char* what) {
        int nx = pick();
        if (nx < 0) deadlock(self, what);
        if (nx != self) {
            give(lanes[nx]);
            wait_baton(lanes[self]);
        }
        if (abort) throw aborted{};
    }

    void barrier(int self) {
        state[self] = st::tg_wait;
        if (++tg_arrived == n) {
            tg_arrived = 0;
            push(0, n);
        }
        yield(self, "threadgroup_barrier");
    }

    void collective(int self, const void* in, void* out, uint32_t param, collective_fn fn, const char* what) {
        const int s = self / 32;
        const int base = s * 32;
        const int size = std::min(32, n - base);
        cin[self] = in;
        cout[self] = out;
        cparam[self] = param;
        cfn[self] = fn;
        state[self] = st::sg_wait;
        if (++sg_arrived[s] == size) {
            sg_arrived[s] = 0;
            for (int l = 0; l < size; ++l) {
                if (cfn[base + l] != fn) {
                    abort = true;
                    err = std::string("simdgroup ") + std::to_string(s) + " of " + describe() +
                          " lanes called different simd functions (one is " + what + ")";
                    deadlock(self, what);
                }
            }
            if (fn) fn(&cin[base], &cout[base], &cparam[base], size);
            push(base, base + size);
        }
        yield(self, what);
    }
};

// finish is called by a GPU thread that returned normally.
inline void finish(group* g, int self) {
    g->state[self] = st::done;
    ++g->done;
    int nx = g->pick();
    if (nx >= 0) {
        give(g->lanes[nx]);
    } else if (g->done < g->n) {
        g->abort = true;
        g->err = "deadlock (threads returned while others wait): " + g->describe();
        g->wake_all(self);
    }
}

inline void* lane_main(void* p) {
    lane* l = static_cast<lane*>(p);
    cur = l;
    for (;;) {
        wait_baton(l);
        if (l->quit) return nullptr;
        group* g = l->g;
        const int tid = l->tid;
        bool ok = !g->abort;
        if (ok) try {
            builtins b{};
            for (int d = 0; d < 3; ++d) {
                b.tgpig[d] = g->tgpig[d];
                b.ntg[d] = g->ntg[d];
            }
            b.tpitg[0] = tid % g->ntg[0];
            b.tpitg[1] = (tid / g->ntg[0]) % g->ntg[1];
            b.tpitg[2] = tid / (g->ntg[0] * g->ntg[1]);
            b.tiisg = tid % 32;
            b.sgitg = tid / 32;
            g->e->fn(g->c, b);
        } catch (aborted&) {
            ok = false;
        } catch (std::exception& ex) {
            ok = false;
            if (!g->abort) {
                g->abort = true;
                g->err = std::string("exception in kernel ") + g->e->name + ": " + ex.what();
                g->state[tid] = st::done;
                g->wake_all(tid);
            }
        }
        if (ok) finish(g, tid);
        if (g->finished.fetch_add(1, std::memory_order_acq_rel) + 1 == g->n) {
            g->all_done.store(1, std::memory_order_release);
            g->all_done.notify_one();
        }
    }
}

// A slot runs one threadgroup at a time with its own pool of lanes and its
// own threadgroup memory.
struct slot {
    std::vector<lane*> lanes;
    std::vector<uint64_t> shmem;  // 8-byte aligned storage
    group g;

    bool grow(int n, std::string& err) {
        while ((int)lanes.size() < n) {
            lane* l = new lane();
            pthread_attr_t attr;
            pthread_attr_init(&attr);
            pthread_attr_setstacksize(&attr, 512 * 1024);
            int rc = pthread_create(&l->th, &attr, lane_main, l);
            pthread_attr_destroy(&attr);
            if (rc != 0) {
                delete l;
                err = "pthread_create failed (" + std::to_string(rc) + ") at " + std::to_string(lanes.size()) + " threads";
                return false;
            }
            lanes.push_back(l);
        }
        return true;
    }

    // run executes one threadgroup; it returns false with err set on failure.
    bool run(const entry* e, const call& c, const uint32_t tgpig[3], const uint32_t ntg[3], size_t shmem_bytes,
             int policy, uint64_t seed, std::string& err) {
        const int n = (int)(ntg[0] * ntg[1] * ntg[2]);
        if (!grow(n, err)) return false;
        shmem.assign((shmem_bytes + 7) / 8, ~0ull);  // poison: every float reads as NaN
        g.n = n;
        g.nsimd = (n + 31) / 32;
        g.lanes = lanes.data();
        g.e = e;
        g.c = c;
        g.c.shmem = shmem_bytes ? shmem.data() : nullptr;
        for (int d = 0; d < 3; ++d) {
            g.tgpig[d] = tgpig[d];
            g.ntg[d] = ntg[d];
        }
        g.policy = policy;
        g.rng = seed ^ (0x51ed270b27c5a1b3ull * (1 + tgpig[0] + 65599ull * (tgpig[1] + 65599ull * tgpig[2])));
        g.state.assign(n, st::idle);
        g.ready.clear();
        g.ready.reserve(n);
        g.head = 0;
        g.tg_arrived = 0;
        g.done = 0;
        g.sg_arrived.assign(g.nsimd, 0);
        g.cin.assign(n, nullptr);
        g.cout.assign(n, nullptr);
        g.cparam.assign(n, 0);
        g.cfn.assign(n, nullptr);
        g.abort = false;
        g.err.clear();
        g.finished.store(0);
        g.all_done.store(0);
        for (int t = 0; t < n; ++t) {
            lanes[t]->g = &g;
            lanes[t]->tid = t;
        }
        g.push(0, n);
        int first = g.pick();
        give(lanes[first]);
        while (g.all_done.load(std::memory_order_acquire) == 0) {
            g.all_done.wait(0, std::memory_order_acquire);
        }
        if (g.abort) {
            err = g.err;
            return false;
        }
        return true;
    }
};

inline std::mutex& launch_mutex() {
    static std::mutex m;
    return m;
}

inline std::vector<slot*>& slots() {
    static std::vector<slot*> s;
    return s;
}

// launch runs a grid of threadgroups of the kernel called name among the
// module's entries es[0:nes]. Groups are taken in the policy's order
// (ascending, descending or shuffled) by up to workers slots at once.
inline int launch(const entry* es, size_t nes, const char* name, const void* args, size_t args_size, void* const* bufs, int nbufs,
                  const uint32_t grid[3], const uint32_t ntg[3], size_t shmem_bytes, int policy, uint64_t seed,
                  int workers, char* errbuf, size_t errlen) {
    auto fail = [&](const std::string& m) {
        if (errlen) {
            std::snprintf(errbuf, errlen, "%s", m.c_str());
        }
        return 1;
    };
    const entry* e = nullptr;
    for (size_t i = 0; i < nes; ++i) {
        if (std::strcmp(es[i].name, name) == 0) e = &es[i];
    }
    if (!e) return fail(std::string("no kernel named ") + name + " in the module");
    if (args_size != e->args_size) {
        return fail(std::string("kernel ") + name + ": args are " + std::to_string(args_size) +
                    " bytes, the kernel's struct is " + std::to_string(e->args_size));
    }
    if (nbufs != e->nbufs) {
        return fail(std::string("kernel ") + name + ": " + std::to_string(nbufs) + " buffers bound, it takes " +
                    std::to_string(e->nbufs));
    }
    const uint64_t n = (uint64_t)ntg[0] * ntg[1] * ntg[2];
    if (n == 0 || n > 1024) return fail("threads per threadgroup must be 1 to 1024, got " + std::to_string(n));
    const uint64_t ng = (uint64_t)grid[0] * grid[1] * grid[2];
    if (ng == 0) return 0;

    std::lock_guard<std::mutex> lock(launch_mutex());
    // The args are copied to aligned storage: the kernel reads them as its struct.
    std::vector<uint64_t> abuf((args_size + 7) / 8 + 1);
    std::memcpy(abuf.data(), args, args_size);
    call c{abuf.data(), bufs, nbufs, nullptr};

    std::vector<uint32_t> order(ng);
    for (uint64_t i = 0; i < ng; ++i) order[i] = (uint32_t)i;
    if (policy == policy_descending) {
        std::reverse(order.begin(), order.end());
    } else if (policy == policy_random) {
        uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
        for (uint64_t i = ng - 1; i > 0; --i) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            std::swap(order[i], order[s % (i + 1)]);
        }
    }
    const int w = (int)std::max<uint64_t>(1, std::min<uint64_t>((uint64_t)std::max(workers, 1), ng));
    while ((int)slots().size() < w) slots().push_back(new slot());

    std::atomic<uint64_t> next{0};
    std::atomic<bool> failed{false};
    std::string first_err;
    std::mutex err_mu;
    auto work = [&](int k) {
        slot* sl = slots()[k];
        std::string err;
        for (;;) {
            if (failed.load()) return;
            uint64_t i = next.fetch_add(1);
            if (i >= ng) return;
            const uint32_t id = order[i];
            const uint32_t tg[3] = {id % grid[0], (id / grid[0]) % grid[1], id / (grid[0] * grid[1])};
            if (!sl->run(e, c, tg, ntg, shmem_bytes, policy, seed, err)) {
                std::lock_guard<std::mutex> l(err_mu);
                if (!failed.exchange(true)) first_err = err;
                return;
            }
        }
    };
    std::vector<std::thread> helpers;
    for (int k = 1; k < w; ++k) helpers.emplace_back(work, k);
    work(0);
    for (auto& h : helpers) h.join();
    if (failed.load()) return fail(first_err);
    return 0;
}

// ---- invoking a kernel of any signature of the form
//   void k(const Args&, Buf0, ..., BufN-1, Shmem, Tgpig, Tpitg, Ntg, Tiisg, Sgitg)

template <class T>
T from3(const uint32_t v[3]);
template <class T>
T from1(uint32_t v) {
    return (T)v;
}

template <class Sig>
struct sig;

template <class A, class... P>
struct sig<void (*)(const A&, P...)> {
    static constexpr int nparams = sizeof...(P);
    static constexpr int nbufs = nparams - 6;
    static_assert(nbufs >= 0, "a kernel takes args, its buffers, threadgroup memory and five builtins");
    using args_t = A;

    template <int K>
    using param_t = std::tuple_element_t<K, std::tuple<P...>>;

    template <int K>
    static param_t<K> get(const call& c, const builtins& b) {
        using T = param_t<K>;
        if constexpr (K < nbufs) {
            return (T)c.bufs[K];
        } else if constexpr (K == nbufs) {
            return (T)c.shmem;
        } else if constexpr (K == nbufs + 1) {
            return from3<T>(b.tgpig);
        } else if constexpr (K == nbufs + 2) {
            return from3<T>(b.tpitg);
        } else if constexpr (K == nbufs + 3) {
            return from3<T>(b.ntg);
        } else if constexpr (K == nbufs + 4) {
            return from1<T>(b.tiisg);
        } else {
            return from1<T>(b.sgitg);
        }
    }

    template <auto F, int... K>
    static void run(const call& c, const builtins& b, std::integer_sequence<int, K...>) {
        F(*static_cast<const A*>(c.args), get<K>(c, b)...);
    }
};

template <auto F>
void invoke(const call& c, const builtins& b) {
    using S = sig<decltype(F)>;
    S::template run<F>(c, b, std::make_integer_sequence<int, S::nparams>{});
}

template <auto F>
constexpr entry make_entry(const char* name) {
    using S = sig<decltype(F)>;
    return entry{name, &invoke<F>, sizeof(typename S::args_t), S::nbufs};
}

// The calls the prelude's MSL functions make.
inline void tg_barrier() { cur->g->barrier(cur->tid); }

inline void run_collective(const void* in, void* out, uint32_t param, collective_fn fn, const char* what) {
    cur->g->collective(cur->tid, in, out, param, fn, what);
}

}  // namespace gdnrt

