/* Makes include/speechclient.h a module Swift can implement with @c @implementation. */
#include "speechclient.h"
