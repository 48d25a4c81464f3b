/* Maps a kernel an ISA variant has no native version of to the plain-C reference.
 *
 * The arch files build their kernel table from canonical names `fk_<kernel>_<variant>`
 * (FK_FN). A name defined here resolves to `fk_<kernel>_generic` instead, so adding a native
 * version means deleting its line here and writing the function in arch/<isa>/. */
#ifndef FK_FALLBACK_H
#define FK_FALLBACK_H

#define FK_CAT_(a, b) a##_##b
#define FK_CAT(a, b) FK_CAT_(a, b)
#define FK_FN(name) FK_CAT(name, FK_VARIANT)

/* NEON has no gather: the GELU table lookup stays scalar on ARM. */
#define fk_gelu_tab_f32_neon fk_gelu_tab_f32_generic
#define fk_gelu_tab_f32_dotprod fk_gelu_tab_f32_generic

#endif
