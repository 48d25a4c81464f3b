/* CPU feature detection (cpuid + xgetbv on x86, getauxval(AT_HWCAP) on AArch64), the ISA cap
 * and the choice of kernel table. Compiled without any ISA flags so it runs on every CPU of
 * the arch. The cap (fk_isa_setup, $FARM_ISA) masks what fk_cpu_features reports, so every
 * consumer (table choice, the plan's feature check, the harness) sees the capped CPU: one
 * place decides, and a capped run can never reach a wider kernel by another path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fk.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
extern const fk_kernels fk_kernels_avx2, fk_kernels_avx512, fk_kernels_avx512vnni, fk_kernels_amx;
static const fk_kernels *const all_tables[] = {&fk_kernels_amx, &fk_kernels_avx512vnni, &fk_kernels_avx512,
                                                &fk_kernels_avx2, &fk_kernels_generic, NULL};
#define FK_X86_AVX2 (FK_FEAT_AVX2 | FK_FEAT_FMA | FK_FEAT_F16C)
#define FK_X86_AVX512 (FK_X86_AVX2 | FK_FEAT_AVX512F | FK_FEAT_AVX512BW | FK_FEAT_AVX512VL | FK_FEAT_AVX512DQ)
/* widest first: fk_isa_level names the first one a CPU has (avx2-vnni and avx512 are not
 * ordered by features; a CPU with both has avx512-vnni or amx too, in practice) */
static const struct { const char *name; uint64_t mask; } levels[] = {
    {"amx", FK_X86_AVX512 | FK_FEAT_AVX512VNNI | FK_FEAT_AMX_TILE | FK_FEAT_AMX_INT8},
    {"avx512-vnni", FK_X86_AVX512 | FK_FEAT_AVX512VNNI},
    {"avx512", FK_X86_AVX512},
    {"avx2-vnni", FK_X86_AVX2 | FK_FEAT_AVXVNNI},
    {"avx2", FK_X86_AVX2},
    {NULL, 0}};
static const char base_level[] = "x86-64";
static const char *const foreign_levels[] = {"baseline", "dotprod", "i8mm", NULL};

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
        if (a >= 1) { /* leaf 7's EAX: its last sub-leaf */
            unsigned a1, b1, c1, d1;
            __cpuid_count(7, 1, a1, b1, c1, d1);
            if (a1 & (1u << 4)) f |= FK_FEAT_AVXVNNI; /* VEX-encoded: the AVX state checked above */
        }
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
/* no i8mm table yet: a CPU (or cap) at i8mm runs the dotprod one */
static const struct { const char *name; uint64_t mask; } levels[] = {
    {"i8mm", FK_FEAT_NEON | FK_FEAT_DOTPROD | FK_FEAT_I8MM},
    {"dotprod", FK_FEAT_NEON | FK_FEAT_DOTPROD},
    {"baseline", FK_FEAT_NEON},
    {NULL, 0}};
static const char base_level[] = "armv8-a";
static const char *const foreign_levels[] = {"avx2", "avx2-vnni", "avx512", "avx512-vnni", "amx", NULL};

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
static const struct { const char *name; uint64_t mask; } levels[] = {{NULL, 0}};
static const char base_level[] = "generic";
static const char *const foreign_levels[] = {NULL};
static uint64_t detect(void) { return 0; }
#endif

static uint64_t cap_mask = ~0ull;
static const char *cap_name;

uint64_t fk_cpu_detected(void) {
    static uint64_t cached;
    static int done;
    if (!done) cached = detect(), done = 1;
    return cached;
}

uint64_t fk_cpu_features(void) { return fk_cpu_detected() & cap_mask; }

const char *fk_isa_cap(void) { return cap_name; }

const char *fk_isa_level(uint64_t features) {
    for (int i = 0; levels[i].name; i++)
        if ((levels[i].mask & features) == levels[i].mask) return levels[i].name;
    return base_level;
}

static void feature_list(uint64_t f, char *buf, size_t len) {
    size_t n = 0;
    buf[0] = 0;
    for (int b = 0; b < 64 && n < len; b++)
        if ((f >> b) & 1) {
            const char *nm = fk_feature_name(b);
            n += (size_t)snprintf(buf + n, len - n, "%s%s", n ? ", " : "", nm ? nm : "?");
        }
}

int fk_isa_setup(const char *level, char *err, size_t errlen) {
    int from_env = !level || !*level;
    if (from_env) level = getenv("FARM_ISA");
    if (!level || !*level || !strcmp(level, "native")) return cap_mask = ~0ull, cap_name = NULL, 0;
    /* $FARM_ISA is host-wide and caps the devices of its own arch (farm/inventory/capped.py):
     * an x86 level in the environment of an aarch64 binary (qemu-user on an x86 host) is
     * not this binary's to honour; named by an option, it is an error */
    for (int i = 0; from_env && foreign_levels[i]; i++)
        if (!strcmp(level, foreign_levels[i])) return cap_mask = ~0ull, cap_name = NULL, 0;
    for (int i = 0; levels[i].name; i++) {
        if (strcmp(level, levels[i].name) != 0) continue;
        uint64_t lacks = levels[i].mask & ~fk_cpu_detected();
        if (lacks) {
            char names[256];
            feature_list(lacks, names, sizeof names);
            snprintf(err, errlen, "ISA level %s needs %s, which this CPU lacks; its level is %s", level, names,
                     fk_isa_level(fk_cpu_detected()));
            return -1;
        }
        cap_mask = levels[i].mask, cap_name = levels[i].name;
        return 0;
    }
    int foreign = 0;
    for (int i = 0; foreign_levels[i]; i++) foreign |= !strcmp(level, foreign_levels[i]);
    size_t n = (size_t)snprintf(err, errlen, foreign ? "ISA level '%s' belongs to another arch; this one's:"
                                                     : "unknown ISA level '%s' for this arch: use", level);
    for (int i = 0; levels[i].name && n < errlen; i++)
        n += (size_t)snprintf(err + n, errlen - n, "%s %s", i ? "," : "", levels[i].name);
    if (n < errlen) snprintf(err + n, errlen - n, " or native");
    return -1;
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
    case 10: return "avxvnni";
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
