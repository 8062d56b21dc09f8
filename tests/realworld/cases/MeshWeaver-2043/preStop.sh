while ! curl -sf -m 5 -o /dev/null http://127.0.0.1:8080/drain; do sleep 5; done
