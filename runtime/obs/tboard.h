/* tboard.h — TensorBoard event files written directly, with no TensorFlow or protobuf dependency.
 *
 * A file DIR/events.out.tfevents.<unix time>.<host>.<pid>.<n> is a sequence of TFRecords:
 *     uint64 length (little endian) | uint32 masked CRC-32C of those 8 bytes |
 *     data[length] | uint32 masked CRC-32C of data
 * (mask: ((c >> 15) | (c << 17)) + 0xa282ead8), each data an Event protobuf encoded by hand:
 *     Event   { double wall_time = 1; int64 step = 2; string file_version = 3;
 *               Summary summary = 5; SessionLog session_log = 7; }
 *     Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
 *     SessionLog { enum status = 1; }  (START = 1)
 * The first record is {wall_time, file_version: "brain.Event:2"}. A resumed run opens a new file
 * and writes a SessionLog START at its first step: TensorBoard merges the files of a directory
 * and drops, on seeing it, the points at that step and later that a crashed run logged after its
 * last checkpoint. Every record is written with a single write() (nothing is buffered), so a
 * record is flushed when hyp_tboard_scalars returns; a torn last record is ignored by readers.
 * CRC-32C (Castagnoli, reflected polynomial 0x82f63b78): table-driven here — Debian ships no C
 * library for it (zlib's crc32 is the other polynomial), and it is 20 lines. */
#ifndef HYP_TBOARD_H
#define HYP_TBOARD_H

#include <stddef.h>
#include <stdint.h>

#include "hyp_err.h"
#include "metrics.h"

typedef struct hyp_tboard hyp_tboard;

/* CRC-32C of n bytes, continuing from crc (0 to start): hyp_crc32c(0, "123456789", 9) = 0xe3069283. */
uint32_t hyp_crc32c(uint32_t crc, const void *data, size_t n);
/* The TFRecord mask of a CRC-32C. */
uint32_t hyp_crc32c_mask(uint32_t crc);

/* Encodes one Event into buf (cap bytes); returns its length, or 0 when it does not fit.
 * file_version: NULL for none; kv/n: the scalar summary (n = 0: none); session_start: add a
 * SessionLog START. Tags longer than 127 bytes are refused (returns 0). */
size_t hyp_tboard_encode_event(uint8_t *buf, size_t cap, double wall_time, int64_t step,
                               const char *file_version, const hyp_metric_kv *kv, int n,
                               int session_start);
/* Frames data as one TFRecord into buf (cap >= n + 16); returns n + 16, or 0 when it does not fit. */
size_t hyp_tboard_frame(uint8_t *buf, size_t cap, const uint8_t *data, size_t n);

/* Creates dir (and parents) and a new event file in it, written with its file_version record.
 * resumed: the next hyp_tboard_scalars also writes a SessionLog START at its step. */
int hyp_tboard_open(hyp_tboard **out, const char *dir, int resumed, hyp_err *e);
/* The file's path. */
const char *hyp_tboard_path(const hyp_tboard *t);
/* Writes one Event of scalars (kv[i].key is the tag; non-finite values are skipped) at step,
 * stamped with the current time. HYP_EFAIL when the write fails. */
int hyp_tboard_scalars(hyp_tboard *t, uint64_t step, const hyp_metric_kv *kv, int n, hyp_err *e);
/* fsyncs (best effort) and closes. NULL is a no-op. */
void hyp_tboard_close(hyp_tboard *t);

#endif
