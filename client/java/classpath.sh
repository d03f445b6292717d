# Sourced by build.sh and run.sh: the jars of Debian 12's gRPC-Java and its dependencies
#   apt-get install default-jdk-headless libgrpc-java protobuf-compiler-grpc-java-plugin \
#     libprotobuf-java libnetty-java libperfmark-java libgoogle-gson-java
#     libgeronimo-annotation-1.3-spec-java (javax.annotation.Generated in the stubs)
#     libguava-java libjsr305-java liberror-prone-java
# With Maven or Gradle instead: io.grpc:grpc-netty, grpc-protobuf and grpc-stub (1.41 or
# later) and com.google.protobuf:protobuf-java 3.21.
jars=(grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
      protobuf guava failureaccess perfmark-api gson error_prone_annotations jsr305
      geronimo-annotation-1.3-spec
      netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-common netty-handler
      netty-resolver netty-transport netty-transport-native-unix-common)
posenc_classpath=
for jar in "${jars[@]}"; do
  [ -f "/usr/share/java/$jar.jar" ] && posenc_classpath+="/usr/share/java/$jar.jar:"
done
