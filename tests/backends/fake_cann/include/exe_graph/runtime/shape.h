// Stand-in: the runtime contexts and types are declared together.
#include "exe_graph/runtime/tiling_context.h"
