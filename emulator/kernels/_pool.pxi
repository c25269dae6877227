# A helper thread for kernels that split their work in disjoint parts of the output (gemm.pyx,
# pointwise.pyx, elementwise.pyx). Speed only: a part computes exactly what the whole would compute
# for its elements.

cdef extern from *:
    """
    /* A helper thread: the caller splits one kernel's work into disjoint parts of its output
       ("chunks"); the caller and the helper both take chunks, one at a time, so a helper that is
       not scheduled (a loaded host) only costs the chunk it holds. Each including module has its
       own pool (static state) and helper thread, started at its first split job. */
    #include <pthread.h>
    typedef void (*ek_chunk_fn)(void *arg);
    static pthread_mutex_t ek_pool_mu = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t ek_pool_work = PTHREAD_COND_INITIALIZER;
    static pthread_cond_t ek_pool_done = PTHREAD_COND_INITIALIZER;
    static ek_chunk_fn ek_job_fn;
    static char *ek_job_args;
    static size_t ek_job_stride;
    static int ek_job_n, ek_job_next, ek_job_finished, ek_job_active;
    static int ek_pool_state;   /* 0: no helper yet, 1: running, -1: could not start one */
    static int ek_pool_helpers = 1;
    static __thread int ek_pool_in_job;   /* a chunk running on this thread: no nested split */
    static unsigned long long ek_pool_jobs; /* jobs handed to the helper so far (for tests) */

    /* Takes the next chunk of the current job (under ek_pool_mu): its index, or -1. */
    static int ek_pool_claim(void) {
        if (!ek_job_active || ek_job_next >= ek_job_n) return -1;
        return ek_job_next++;
    }
    static void *ek_pool_main(void *unused) {
        int i;
        ek_chunk_fn fn;
        char *arg;
        (void)unused;
        ek_pool_in_job = 1;
        pthread_mutex_lock(&ek_pool_mu);
        for (;;) {
            while ((i = ek_pool_claim()) < 0) pthread_cond_wait(&ek_pool_work, &ek_pool_mu);
            fn = ek_job_fn;
            arg = ek_job_args + (size_t)i * ek_job_stride;
            pthread_mutex_unlock(&ek_pool_mu);
            fn(arg);
            pthread_mutex_lock(&ek_pool_mu);
            if (++ek_job_finished == ek_job_n) pthread_cond_signal(&ek_pool_done);
        }
        return NULL;
    }
    /* A child of fork() has no helper thread: it starts its own when it needs one. */
    static void ek_pool_after_fork(void) {
        pthread_mutex_init(&ek_pool_mu, NULL);
        pthread_cond_init(&ek_pool_work, NULL);
        pthread_cond_init(&ek_pool_done, NULL);
        ek_job_active = 0;
        ek_pool_state = 0;
    }
    /* Runs fn(args + i * stride) for i in [0, n), on this thread and the helper; returns when
       all are done. Without a helper (disabled, or it could not start) all run here. */
    static void ek_pool_run(ek_chunk_fn fn, void *args, size_t stride, int n) {
        int i;
        pthread_t tid;
        pthread_attr_t attr;
        if (n > 1 && ek_pool_helpers > 0 && ek_pool_state == 0) {
            static int forks_handled;
            if (!forks_handled) forks_handled = pthread_atfork(NULL, NULL, ek_pool_after_fork) == 0;
            ek_pool_state = -1;
            if (forks_handled && pthread_attr_init(&attr) == 0) {
                pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
                if (pthread_create(&tid, &attr, ek_pool_main, NULL) == 0) ek_pool_state = 1;
                pthread_attr_destroy(&attr);
            }
        }
        if (n <= 1 || ek_pool_state != 1 || ek_pool_helpers <= 0 || ek_pool_in_job) {
            for (i = 0; i < n; i++) fn((char *)args + (size_t)i * stride);
            return;
        }
        ek_pool_in_job = 1;
        pthread_mutex_lock(&ek_pool_mu);
        ek_pool_jobs++;
        ek_job_fn = fn;
        ek_job_args = (char *)args;
        ek_job_stride = stride;
        ek_job_n = n;
        ek_job_next = 0;
        ek_job_finished = 0;
        ek_job_active = 1;
        pthread_cond_signal(&ek_pool_work);
        while ((i = ek_pool_claim()) >= 0) {
            pthread_mutex_unlock(&ek_pool_mu);
            fn((char *)args + (size_t)i * stride);
            pthread_mutex_lock(&ek_pool_mu);
            ++ek_job_finished;
        }
        while (ek_job_finished < ek_job_n) pthread_cond_wait(&ek_pool_done, &ek_pool_mu);
        ek_job_active = 0;
        pthread_mutex_unlock(&ek_pool_mu);
        ek_pool_in_job = 0;
    }
    static unsigned long long ek_pool_job_count(void) { return ek_pool_jobs; }
    static int ek_pool_set_helpers(int n) {
        int old = ek_pool_helpers;
        ek_pool_helpers = n > 0 ? 1 : 0;
        return old;
    }
    """
    ctypedef void (*ek_chunk_fn)(void* arg) noexcept nogil
    void ek_pool_run(ek_chunk_fn fn, void* args, size_t stride, int n) noexcept nogil
    int ek_pool_set_helpers(int n) noexcept nogil
    unsigned long long ek_pool_job_count() noexcept nogil
