/* test_stop_flag.c — the stop flag and the time budget of runtime/train/preempt.c (v2177): a
 * signal sent to the process sets the flag (first signal kept, every one counted, the notice
 * time recorded) and is handled on the watcher thread, not on the thread that installed it (which
 * blocks the signals); --deadline's rule stops when another step plus a checkpoint (25% margin
 * each) would overrun, using the measured save time once there is one. The end-to-end behaviour
 * (exit status, checkpoints, bit-exact resume, mpirun) is tests/gen/test_preempt.sh. */
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include "hyp_test.h"
#include "preempt.h"

static void wait_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_v2177_signals_set_the_flag(void) {
    hyp_err e = {{0}};
    CHECK(hyp_stop_install(&e) == HYP_OK, "test_v2177_install %s", e.msg);
    CHECK(hyp_stop_signal() == 0 && hyp_stop_notice_time() == 0, "test_v2177_no_signal_no_flag");
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    CHECK(sigismember(&cur, SIGTERM) && sigismember(&cur, SIGINT) && sigismember(&cur, SIGUSR1),
          "test_v2177_installing_thread_blocks_the_three_signals");
    double before = hyp_stop_now();
    kill(getpid(), SIGUSR1);
    for (int i = 0; i < 200 && !hyp_stop_signal(); i++) wait_ms(5);
    CHECK(hyp_stop_signal() == SIGUSR1, "test_v2177_sigusr1_sets_the_flag");
    CHECK(hyp_stop_notice_time() >= before - 1.0 && hyp_stop_notice_time() <= hyp_stop_now() + 0.01,
          "test_v2177_notice_time_recorded (%.3f vs %.3f)", hyp_stop_notice_time(), before);
    kill(getpid(), SIGTERM);
    kill(getpid(), SIGINT);
    for (int i = 0; i < 200 && hyp_stop_signal_count() < 3; i++) wait_ms(5);
    CHECK(hyp_stop_signal() == SIGUSR1 && hyp_stop_signal_count() == 3,
          "test_v2177_later_signals_counted_first_kept (count %d)", hyp_stop_signal_count());
    CHECK(!strcmp(hyp_stop_signal_name(SIGTERM), "SIGTERM"), "test_v2177_signal_names");
}

static void test_v2177_deadline_budget(void) {
    hyp_stop s;
    hyp_stop_init(&s, 0, 1e6);
    CHECK(!hyp_stop_deadline_near(&s, s.t_start + 1e6), "test_v2177_no_deadline_never_near");
    hyp_stop_init(&s, 10, 100e6); /* no save measured: 0.05 s + 100 MB at 100 MB/s = 1.05 s */
    CHECK(s.ckpt_last == 0 && hyp_stop_ckpt_estimate(&s) > 1.04 && hyp_stop_ckpt_estimate(&s) < 1.06,
          "test_v2177_ckpt_estimate_before_a_save %.3f", hyp_stop_ckpt_estimate(&s));
    hyp_stop_note_step(&s, 2.0);
    hyp_stop_note_step(&s, 1.0); /* the longest step counts */
    /* need = 1.25 * (2 + 1.05) = 3.8125 s */
    CHECK(!hyp_stop_deadline_near(&s, s.t_start + 6.18), "test_v2177_room_for_a_step_and_a_save");
    CHECK(hyp_stop_deadline_near(&s, s.t_start + 6.19), "test_v2177_stops_when_a_step_and_a_save_would_overrun");
    hyp_stop_note_ckpt(&s, 0.2); /* measured: need = 1.25 * 2.2 = 2.75 s */
    CHECK(!hyp_stop_deadline_near(&s, s.t_start + 7.24) && hyp_stop_deadline_near(&s, s.t_start + 7.26),
          "test_v2177_uses_the_measured_save_time");
}

int main(void) {
    test_v2177_deadline_budget();
    test_v2177_signals_set_the_flag();
    return hyp_test_finish();
}
