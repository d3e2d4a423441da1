// segments.cuh — the optimizer kernels' tensor table: segments of the parameter arena, each ending
// at seg_end[s] (sorted), with a per-segment value (weight decay). Included by adamw and lion.
// The segment holding element i: the first s with seg_end[s] > i (binary search).
__device__ __forceinline__ int segment_of(const long* seg_end, int nseg, long i) {
    int lo = 0, hi = nseg - 1;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (seg_end[mid] > i) hi = mid; else lo = mid + 1;
    }
    return lo;
}
