#include <stdio.h>
#include <nghttp2/nghttp2.h>
int main(void) { printf("%p\n", (void*)nghttp2_session_client_new); return 0; }
