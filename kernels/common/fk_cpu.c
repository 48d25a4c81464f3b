/* CPU feature detection (cpuid + xgetbv on x86, getauxval(AT_HWCAP) on AArch64) and the
 * choice of kernel table. Compiled without any ISA flags so it runs on every CPU of the arch. */
#include <stddef.h>
#include <string.h>

#include "fk.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
extern const fk_kernels fk_kernels_avx2, fk_kernels_avx512, fk_kernels_amx;
static const fk_kernels *const all_tables[] = {&fk_kernels_amx, &fk_kernels_avx512, &fk_kernels_avx2,
                                                &fk_kernels_generic, NULL};

/* AMX tile data is an XSAVE feature Linux (5.16+) enables per process on request; without the
 * permission the first tile instruction faults, so no permission means no AMX. */
static int amx_permitted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#else
    return 0;
#endif
}

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static uint64_t detect(void) {
    unsigned a, b, c, d;
    uint64_t f = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    /* AVX state must be enabled by the OS (OSXSAVE + XCR0 bits), not just present. */
    if (!(c & (1u << 27)) || (xgetbv0() & 0x6) != 0x6) return 0;
    int avx512_os = (xgetbv0() & 0xE6) == 0xE6;
    if (c & (1u << 12)) f |= FK_FEAT_FMA;
    if (c & (1u << 29)) f |= FK_FEAT_F16C;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        if (b & (1u << 5)) f |= FK_FEAT_AVX2;
        if (avx512_os) {
            if (b & (1u << 16)) f |= FK_FEAT_AVX512F;
            if (b & (1u << 17)) f |= FK_FEAT_AVX512DQ;
            if (b & (1u << 30)) f |= FK_FEAT_AVX512BW;
            if (b & (1u << 31)) f |= FK_FEAT_AVX512VL;
            if (c & (1u << 11)) f |= FK_FEAT_AVX512VNNI;
        }
        /* AMX-TILE (edx 24) and AMX-INT8 (edx 25), tile config + data enabled in XCR0. */
        if ((d & (3u << 24)) == (3u << 24) && (xgetbv0() & (3ull << 17)) == (3ull << 17) && amx_permitted())
            f |= FK_FEAT_AMX_TILE | FK_FEAT_AMX_INT8;
    }
    return f;
}
#elif defined(__aarch64__)
#include <sys/auxv.h>
extern const fk_kernels fk_kernels_neon, fk_kernels_dotprod;
static const fk_kernels *const all_tables[] = {&fk_kernels_dotprod, &fk_kernels_neon,
                                                &fk_kernels_generic, NULL};

static uint64_t detect(void) {
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    uint64_t f = 0;
    if (hw & (1ul << 1)) f |= FK_FEAT_NEON;     /* HWCAP_ASIMD */
    if (hw & (1ul << 20)) f |= FK_FEAT_DOTPROD; /* HWCAP_ASIMDDP */
    if (hw & (1ul << 22)) f |= FK_FEAT_SVE;     /* HWCAP_SVE */
    if (hw2 & (1ul << 13)) f |= FK_FEAT_I8MM;   /* HWCAP2_I8MM */
    return f;
}
#else
static const fk_kernels *const all_tables[] = {&fk_kernels_generic, NULL};
static uint64_t detect(void) { return 0; }
#endif

uint64_t fk_cpu_features(void) {
    static uint64_t cached;
    static int done;
    if (!done) cached = detect(), done = 1;
    return cached;
}

const char *fk_feature_name(int bit) {
    switch (bit) {
    case 0: return "avx2";
    case 1: return "fma";
    case 2: return "avx512f";
    case 3: return "avx512bw";
    case 4: return "avx512vl";
    case 5: return "avx512dq";
    case 6: return "f16c";
    case 7: return "avx512vnni";
    case 8: return "amx_tile";
    case 9: return "amx_int8";
    case 16: return "neon";
    case 17: return "dotprod";
    case 18: return "i8mm";
    case 19: return "sve";
    default: return NULL;
    }
}

const fk_kernels *const *fk_all_kernels(void) { return all_tables; }

const fk_kernels *fk_select(const char *name) {
    uint64_t have = fk_cpu_features();
    fk_init();
    for (int i = 0; all_tables[i]; i++) {
        const fk_kernels *k = all_tables[i];
        if (name && *name && strcmp(name, "auto") != 0 && strcmp(name, k->name) != 0) continue;
        if ((k->needs & have) == k->needs) return k;
        if (name && *name && strcmp(name, "auto") != 0) return NULL;
    }
    return NULL;
}
