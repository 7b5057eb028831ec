/* plugin.c -- one-time plugin set-up and the plugin's attributes.
 *
 * jaxlib calls PJRT_Plugin_Initialize once after loading the library and reads
 * PJRT_Plugin_Attributes to learn, e.g., which StableHLO version to emit.  The device needs no
 * global set-up.  The attributes come from dr_program_attributes() when a program reader
 * defines it (it knows which StableHLO versions it reads); otherwise the list is empty.
 */
#include "dumpref.h"

PJRT_Error* dr_Plugin_Initialize(PJRT_Plugin_Initialize_Args* args) {
  DR_ENTER(PJRT_Plugin_Initialize, args, extension_start);
  return NULL;
}

PJRT_Error* dr_Plugin_Attributes(PJRT_Plugin_Attributes_Args* args) {
  DR_ENTER(PJRT_Plugin_Attributes, args, num_attributes);
  size_t count = 0;
  const PJRT_NamedValue* attributes = NULL;
  if (dr_program_attributes != NULL) attributes = dr_program_attributes(&count);
  args->attributes = attributes;
  args->num_attributes = attributes != NULL ? count : 0;
  return NULL;
}
