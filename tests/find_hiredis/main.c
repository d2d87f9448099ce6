/* Calls hiredis without a server: redisFormatCommand's RESP bytes, and the
   header version FindHiredis.cmake reported. */
#include <hiredis/hiredis.h>

#include <stdio.h>
#include <string.h>

#define STR2(x) #x
#define STR(x) STR2(x)

int main(void) {
  static const char expected[] = "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nhello\r\n";
  char* command = NULL;
  int length = redisFormatCommand(&command, "SET %s %b", "key", "hello", (size_t)5);
  if (length != (int)strlen(expected) || memcmp(command, expected, (size_t)length) != 0) {
    fprintf(stderr, "redisFormatCommand gave %d bytes: %.*s\n", length, length > 0 ? length : 0,
            command ? command : "");
    return 1;
  }
  redisFreeCommand(command);
  const char* version = STR(HIREDIS_MAJOR) "." STR(HIREDIS_MINOR) "." STR(HIREDIS_PATCH);
  if (strcmp(version, EXPECTED_VERSION) != 0) {
    fprintf(stderr, "hiredis.h is %s, FindHiredis said %s\n", version, EXPECTED_VERSION);
    return 1;
  }
  printf("hiredis %s: redisFormatCommand OK\n", version);
  return 0;
}
