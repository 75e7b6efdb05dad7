// managed by gpulab.inference
// A minimal CUDA activity tracer for machines without Nsight Systems: the CUDA driver loads it
// through CUDA_INJECTION64_PATH and CUPTI records every kernel (also those inside CUDA graphs),
// copy, memset, synchronisation and runtime call with GPU timestamps, one line each, into
// GPULAB_TRACE_OUT. scripts/cupti-trace-summary.py turns the lines into figures per token.
//
//   gcc -O2 -shared -fPIC -I$CUDA/include scripts/cupti-trace.c -L$CUDA/lib64 -lcupti -o libtrace.so
//   CUDA_INJECTION64_PATH=$PWD/libtrace.so GPULAB_TRACE_OUT=trace.txt llama-bench ...
//
// Lines (times in ns):  K start end graph_id stream_id name | M start end bytes copy_kind stream_id graph_id
//                       Z start end bytes stream_id graph_id | S start end sync_type stream_id
//                       R start end thread_id api_name
#include <cupti.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define TRACE_BUFFER_BYTES (16u << 20)

static FILE *trace_out;
static pthread_mutex_t trace_lock = PTHREAD_MUTEX_INITIALIZER;

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = (uint8_t *) aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, TRACE_BUFFER_BYTES);
    *size = *buffer ? TRACE_BUFFER_BYTES : 0;
    *max_records = 0;
}

static void write_record(const CUpti_Activity *record) {
    switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
        const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *) record;
        fprintf(trace_out, "K %llu %llu %u %u %s\n", (unsigned long long) k->start, (unsigned long long) k->end,
                k->graphId, k->streamId, k->name ? k->name : "?");
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *) record;
        fprintf(trace_out, "M %llu %llu %llu %u %u %u\n", (unsigned long long) m->start, (unsigned long long) m->end,
                (unsigned long long) m->bytes, (unsigned) m->copyKind, m->streamId, m->graphId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        const CUpti_ActivityMemset4 *z = (const CUpti_ActivityMemset4 *) record;
        fprintf(trace_out, "Z %llu %llu %llu %u %u\n", (unsigned long long) z->start, (unsigned long long) z->end,
                (unsigned long long) z->bytes, z->streamId, z->graphId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const CUpti_ActivitySynchronization2 *s = (const CUpti_ActivitySynchronization2 *) record;
        fprintf(trace_out, "S %llu %llu %u %u\n", (unsigned long long) s->start, (unsigned long long) s->end,
                (unsigned) s->type, s->streamId);
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
        const CUpti_ActivityAPI *r = (const CUpti_ActivityAPI *) record;
        const char *name = NULL;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, r->cbid, &name) != CUPTI_SUCCESS || !name) {
            name = "?";
        }
        fprintf(trace_out, "R %llu %llu %u %s\n", (unsigned long long) r->start, (unsigned long long) r->end,
                r->threadId, name);
        break;
    }
    default:
        break;
    }
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size, size_t valid) {
    (void) ctx;
    (void) stream_id;
    (void) size;
    CUpti_Activity *record = NULL;
    pthread_mutex_lock(&trace_lock);
    while (trace_out && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        write_record(record);
    }
    pthread_mutex_unlock(&trace_lock);
    free(buffer);
}

static void flush_at_exit(void) {
    cuptiActivityFlushAll(1);
    pthread_mutex_lock(&trace_lock);
    if (trace_out) {
        fclose(trace_out);
        trace_out = NULL;
    }
    pthread_mutex_unlock(&trace_lock);
}

// Called once by the CUDA driver when CUDA_INJECTION64_PATH names this library.
int InitializeInjection(void) {
    const char *path = getenv("GPULAB_TRACE_OUT");
    trace_out = fopen(path ? path : "cupti-trace.txt", "w");
    if (!trace_out) {
        return 0;
    }
    setvbuf(trace_out, NULL, _IOFBF, 1 << 20);
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
        fprintf(stderr, "cupti-trace: cuptiActivityRegisterCallbacks failed\n");
        return 0;
    }
    const CUpti_ActivityKind kinds[] = {
        CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
        CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, CUPTI_ACTIVITY_KIND_RUNTIME,
    };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        if (cuptiActivityEnable(kinds[i]) != CUPTI_SUCCESS) {
            fprintf(stderr, "cupti-trace: activity kind %d not enabled\n", (int) kinds[i]);
        }
    }
    // deliver records every second, so a server stopped by a signal loses at most the last one
    cuptiActivityFlushPeriod(1000);
    atexit(flush_at_exit);
    return 1;
}
