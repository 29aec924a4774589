/* SPDX-License-Identifier: MIT */
/* rpc_int.h — private helpers shared by the files of core/rpc. */
#ifndef MT_RPC_INT_H
#define MT_RPC_INT_H

#include "rpc/mt_rpc.h"

/* "Service.Method" into out; 0 when it does not fit. */
int mt_rpc__method_name(const ProtobufCServiceDescriptor *svc, const char *method, char *out,
                        size_t cap);
/* Look up "Service.Method" in svc; NULL when the service or the method is unknown. */
const ProtobufCMethodDescriptor *mt_rpc__find_method(const ProtobufCServiceDescriptor *svc,
                                                     const char *full_name);

#endif
