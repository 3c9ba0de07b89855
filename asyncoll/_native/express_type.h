/* Mirrors asyncoll/_group/express.py: the Express type, made for a group and
 * taught the calls it takes (express_type.c).
 */
#ifndef ASYNCOLL_EXPRESS_TYPE_H
#define ASYNCOLL_EXPRESS_TYPE_H

#include "express.h"

extern PyTypeObject ExpressType;

/* Ready the Express type and the names it reads (module init). */
int express_ready(void);

#endif
