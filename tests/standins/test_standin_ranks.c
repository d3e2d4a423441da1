/* test_standin_ranks.c — run under mpirun: the cuda device layer (dev_cuda.c) on the driver
 * stand-in picks each rank's GPU from its node-local rank even when the launcher exports no
 * local-rank variable (as under MPICH, Intel MPI or a bare PMIx launch: the test removes Open
 * MPI's), and a failed comm_init (no NCCL in the library folder) leaves no half-set state: a later
 * collective is refused with a message instead of calling a function NCCL never provided.
 * HYP_STANDIN_DEVICES is the world size, so every rank has a GPU of its own. Then, with the NCCL
 * stand-in: both ranks forced onto GPU 0 (HYP_CUDA_DEVICE=0) are refused at comm_init as NCCL
 * refuses them ("Duplicate GPU detected"), and on their own GPUs the same init succeeds, setting
 * NCCL_ALGO=Tree from the communicator's v2171 algorithm. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/hyp_test.h"
#include "coll.h"
#include "device.h"

int main(int argc, char **argv) {
    hyp_err e;
    hyp_coll *c;
    if (hyp_coll_init(&argc, &argv, &c, &e)) {
        printf("FAIL coll init: %s\n", e.msg);
        return 1;
    }
    int rank = hyp_coll_rank(c), world = hyp_coll_world(c);
    char devs[16], dir[256];
    snprintf(devs, sizeof devs, "%d", world);
    setenv("HYP_STANDIN_DEVICES", devs, 1);
    /* a library folder holding the driver stand-in alone: NCCL cannot load */
    snprintf(dir, sizeof dir, "%s/standin_ranks_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    char link[300];
    snprintf(link, sizeof link, "%s/libcuda.so.1", mkdtemp(dir) ? dir : "/nonexistent");
    if (symlink(HYP_STANDIN_DIR "/libcuda.so.1", link)) printf("note: symlink %s failed\n", link);
    setenv("HYP_CUDA_LIBDIR", dir, 1);
    unsetenv("HYP_CUDA_DEVICE");
    unsetenv("OMPI_COMM_WORLD_LOCAL_RANK"), unsetenv("SLURM_LOCALID"), unsetenv("LOCAL_RANK");
    check(hyp_coll_local_rank(c) == rank && hyp_coll_local_world(c) == world, "coll: node-local rank from MPI_Comm_split_type(SHARED)",
          "rank %d: local %d of %d", rank, hyp_coll_local_rank(c), hyp_coll_local_world(c));
    hyp_device *d = NULL;
    if (hyp_device_open("cuda", &d, &e)) {
        printf("FAIL cuda device on the stand-in: %s\n", e.msg);
        return 1;
    }
    check(d->info.ordinal == rank, "cuda: each rank takes the GPU of its node-local rank, without launcher variables",
          "rank %d: GPU %d", rank, d->info.ordinal);
    int rc = d->comm_init(d, c, &e);
    check(rc != 0 && strstr(e.msg, "NCCL unavailable"), "cuda: comm_init without NCCL fails with a message", "%s", rc ? e.msg : "succeeded");
    void *buf = NULL;
    d->mem_alloc(d, &buf, 64, &e);
    rc = d->all_reduce(d, buf, 16, HYP_DT_F32, HYP_RED_SUM, NULL, &e);
    check(rc == HYP_EINPUT && strstr(e.msg, "before comm_init"), "cuda: a collective after the failed comm_init is refused (no half-set state)",
          "%s", rc ? e.msg : "accepted");
    d->mem_free(d, buf, &e);
    d->close(d);
    unlink(link), rmdir(dir);

    /* the duplicate-GPU rule, planted: every rank on GPU 0 */
    setenv("HYP_CUDA_LIBDIR", HYP_STANDIN_DIR, 1);
    setenv("HYP_CUDA_DEVICE", "0", 1);
    if (hyp_device_open("cuda", &d, &e)) {
        printf("FAIL cuda device on the stand-in: %s\n", e.msg);
        return 1;
    }
    rc = d->comm_init(d, c, &e);
    check(rc == HYP_EINPUT && strstr(e.msg, "two ranks of one node on one GPU"), "nccl: two ranks on one GPU are refused at comm_init, saying why (planted)", "%s",
          rc ? e.msg : "accepted");
    d->close(d);
    unsetenv("HYP_CUDA_DEVICE");
    unsetenv("NCCL_ALGO"); /* v2171: the communicator's algorithm reaches NCCL as NCCL_ALGO */
    rc = hyp_coll_set_allreduce(c, HYP_AR_TREE, 0, &e);
    check(rc == 0, "v2171: tree set on the communicator", "%s", rc ? e.msg : "ok");
    if (hyp_device_open("cuda", &d, &e)) {
        printf("FAIL cuda device on the stand-in: %s\n", e.msg);
        return 1;
    }
    rc = d->comm_init(d, c, &e);
    check(rc == 0, "nccl: the same init with a GPU per rank succeeds", "%s", rc ? e.msg : "ok");
    const char *algo = getenv("NCCL_ALGO");
    check(algo && !strcmp(algo, "Tree"), "v2171: comm_init set NCCL_ALGO=Tree from the communicator's tree", "%s", algo ? algo : "unset");
    d->close(d);
    printf("rank %d/%d: ", rank, world);
    int st = hyp_test_finish();
    hyp_coll_finalize(c);
    return st;
}
