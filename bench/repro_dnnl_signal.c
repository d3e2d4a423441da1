/* repro_dnnl_signal.c — why the trainer's signal handler never runs on a compute thread
 * (runtime/train/preempt.c): Debian's oneDNN 2.6.3 dnnl_sgemm corrupts the heap when a signal
 * handler — even an empty one — interrupts it. Not built by CMake (not a benchmark); by hand:
 *   gcc -O2 bench/repro_dnnl_signal.c -o /tmp/repro -ldnnl && OMP_NUM_THREADS=1 /tmp/repro
 * Measured here: aborts with "free(): invalid next size (fast)" within 3000 iterations with a
 * 200 us SIGALRM timer; runs clean ("ok, 0 signals") without the timer (-DNO_TIMER). */
#include <dnnl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
static volatile sig_atomic_t n;
static void h(int s) { (void)s; n++; }
int main(void) {
    struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_handler = h; sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
#ifndef NO_TIMER
    setitimer(ITIMER_REAL, &it, NULL);
#else
    (void)it;
#endif
    int M = 1024, N = 192, K = 64;
    for (int iter = 0; iter < 3000; iter++) {
        float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N), *c = malloc(sizeof(float) * M * N);
        for (int i = 0; i < M * K; i++) a[i] = 1e-3f * (i % 7);
        for (int i = 0; i < K * N; i++) b[i] = 1e-3f * (i % 5);
        dnnl_sgemm('N', 'T', M, N, K, 1.f, a, K, b, K, 0.f, c, N);
        dnnl_sgemm('T', 'N', K, N, M, 1.f, a, K, c, N, 0.f, b, N);
        free(a); free(b); free(c);
    }
    printf("ok, %d signals\n", (int)n);
    return 0;
}
