/* SPDX-License-Identifier: MIT */
/* empty.c — placeholder translation unit for a library folder that has no sources yet. */
typedef int mt_empty_translation_unit;
