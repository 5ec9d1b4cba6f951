// Package validate holds offline checks of gomsg's deployment files: the
// Dockerfile, docker-compose.yml (alone and with deploy/compose/redis-cluster.yml
// laid over it) and the Helm chart. It is its own module so
// that compose-go, Helm and the Kubernetes API types stay out of gomsg's main
// module. The tests build the gomsg binary from the main module and read the
// flags it accepts from `gomsg <service> -h`, so every GOMSG_* variable the
// deployment files set is checked against the real binary.
package validate
